"""grammar.py: sizes, disjoint lexicons, aligned A/B roles, determinism, held-out disjointness,
and a surface that reads as English (articles, adjectives)."""
import pytest

import grammar


def test_sizes_and_kinds():
    assert len(grammar.VOCAB) == 147 and len(set(grammar.VOCAB)) == 147
    assert len(grammar.ROLES) == 20 and "rc_verb" in grammar.ROLES
    assert set(grammar.ROLE_KIND) == set(grammar.ROLES)
    assert set(grammar.ROLE_KIND.values()) == {"structural", "content"}
    assert set(grammar.DEEP_ROLES) <= set(grammar.ROLES)


def test_lexicons_disjoint_and_function_words_shared():
    content = {g: {w for c in grammar.CLASSES for w in grammar.LEXICON[g][c]} for g in "AB"}
    assert not content["A"] & content["B"]
    assert not (content["A"] | content["B"]) & set(grammar.FUNCTION_WORDS)
    used = {g: {w for ws, _ in grammar.sample(g, 3000, seed=0) for w in ws} for g in "AB"}
    assert used["A"] - content["A"] == used["B"] - content["B"]  # the same function words
    assert used["A"] | used["B"] == set(grammar.VOCAB)  # every word of VOCAB occurs


def test_same_roles_for_A_and_B_and_deterministic():
    a, b = grammar.sample("A", 200, seed=7), grammar.sample("B", 200, seed=7)
    assert [r for _, r in a] == [r for _, r in b]
    assert all(len(w) == len(r) for w, r in a + b)
    assert grammar.sample("A", 200, seed=7) == a
    assert grammar.sample("A", 200, seed=8) != a


def test_constructions_present():
    sents = grammar.sample("A", 2000, seed=0)
    roles = [set(r) for _, r in sents]
    assert all(any(role in rs for rs in roles) for role in grammar.ROLES)
    # centre embedding to depth 2: two relativizers open before the first verb of the clause
    deep = [(w, r) for w, r in sents if "deep_verb" in r]
    assert deep and all(r[i + 1] == "rc_verb" for _, r in deep for i, x in enumerate(r)
                        if x == "deep_verb")  # the stacked verbs: deep_verb, then rc_verb
    assert any(r.count("rel") >= 2 for _, r in deep)


def test_split_is_disjoint_and_aligned():
    sp = grammar.split(300, 100, 200, seed=3)
    for g in "AB":
        keys = {s: {" ".join(w) for w, _ in sp[g][s]} for s in ("train", "val", "test")}
        assert len(keys["train"]) == 300 and len(keys["val"]) == 100 and len(keys["test"]) == 200
        assert not keys["train"] & keys["test"] and not keys["train"] & keys["val"]
        assert not keys["val"] & keys["test"]
    assert [r for _, r in sp["A"]["test"]] == [r for _, r in sp["B"]["test"]]


def test_encode_and_bad_input():
    ids, roles, lengths = grammar.encode(grammar.sample("B", 5, seed=0))
    assert ids.shape == roles.shape and ids.shape[0] == 5 and int(lengths.max()) == ids.shape[1]
    assert ((ids >= 0) == (roles >= 0)).all()
    with pytest.raises(ValueError, match="grammar must be"):
        grammar.sample("C", 3, seed=0)


@pytest.mark.parametrize("g", grammar.GRAMMARS)
def test_surface_reads_as_english(g):
    """No "a" before a vowel, no adjective twice in one noun phrase, "very" only before a
    gradable adjective, and two adjectives always gradable-then-descriptive."""
    gradable = set(grammar.LEXICON[g]["adj"][:grammar.N_GRADABLE])
    for words, roles in grammar.sample(g, 2000, seed=0):
        for w, nxt in zip(words, words[1:]):
            assert not (w == "a" and nxt[0] in "aeiou"), " ".join(words)
            assert w != "very" or nxt in gradable, " ".join(words)
        adjs = []  # the adjectives of the noun phrase being read
        for w, r in zip(words + ["."], roles + ["end"]):
            if r.endswith("_adj"):
                adjs.append(w)
            elif r != "intens":
                assert len(adjs) == len(set(adjs)), " ".join(words)
                assert len(adjs) < 2 or (adjs[0] in gradable and adjs[1] not in gradable), " ".join(words)
                adjs = []
