"""Two controlled formal grammars with identical structure and disjoint content words.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Small scale: SPCN": grammatical
role assignment on a formal grammar with a 147-word vocabulary and 20 roles; Grammar A
(animals) and Grammar B (vehicles) share every production rule and function word and differ
only in their content lexicon. Transfer = fit on A, test on B. The paper gives no rules; the
ones below are this project's (numbered in PAPER.md, "Choices in grammar.py").

Shape/size glossary
    V = 147 words: F = 15 shared function words (5 determiners, 2 relativizers, 6
        prepositions, "very", "."), plus 66 content words per grammar (26 nouns, 16 adjectives,
        18 transitive verbs, 6 intransitive verbs), disjoint between A and B: 15 + 2 * 66 = 147.
    R = 20 roles (ROLES). A sentence is a pair (words, roles) of two equal-length lists.

Productions (both grammars; probabilities in `_Sampler`)
    S     -> NP_subj VP "."
    NP    -> Det AdjP N  (PP | RC)?                     main-clause and PP noun phrases
    AdjP  -> nothing | "very"? Adj | "very"? AdjG AdjD  0, 1 or 2 adjectives
    VP    -> Vt NP_obj PP? | Vi PP?
    PP    -> Prep Det AdjP N
    RC    -> "that" Vt Det N                            subject-relative  ("that chases the cat")
           | "which" Det N RC2? Vt                      object-relative   ("which the cat chases")
    RC2   -> "which" Det N Vt                           centre-embedded object-relative, depth 2
    Adjectives are gradable (AdjG: size, age, temper) or descriptive (AdjD: colour, pattern,
    coat); "very" goes only before a gradable one, and two adjectives are one of each, in that
    order ("the very big brown dog"), so they never repeat or contradict each other. No content
    word starts with a vowel, so "a" is always the right article. Noun phrases inside relative
    clauses are bare (Det N); RC2 makes "the dog which the cat which the fox sees chases
    sleeps ." (depth 2: the "deep-embedded" roles). The relativizer marks the clause type
    ("that" subject-relative, "which" object-relative), so the clause's structure is visible
    in the function words.
    Every random choice is an index into a word class (and the adjective groups are index
    ranges), so A and B under one seed make the same draws: the same role sequences, and B is
    A with its content words swapped index for index.

The 20 roles, and their kind. A role is STRUCTURAL when the classes of the preceding words
(determiner, adjective, noun, verb, preposition, relativizer, ...) decide it for whatever word
fills the slot: the slot is fixed by the pattern over time, so a new lexicon does not change
it. A role is CONTENT when the same preceding pattern admits two roles and only which word
it is decides: after a main-clause or PP determiner, 0-2 adjectives precede the noun, so
"the ___" is an adjective or the head noun depending on the word alone.
    subj_det   structural  determiner opening the sentence (always first)
    subj_adj   content     adjective in the subject NP (vs the noun: decided by the word)
    subj       content     head noun of the subject (vs an adjective: decided by the word)
    verb       structural  main-clause verb: the content word after the complete subject NP
    obj_det    structural  determiner right after the main verb
    obj_adj    content     adjective in the object NP (vs the noun)
    obj        content     head noun of the object (vs an adjective)
    prep       structural  preposition (a function word opening a PP)
    pp_det     structural  determiner right after a preposition
    pp_adj     content     adjective inside a PP (vs its noun)
    pobj       content     head noun of a PP (vs an adjective)
    rel        structural  relativizer "that"/"which" opening a relative clause (any depth)
    rc_det     structural  determiner inside a relative clause (its NPs are bare: Det N)
    rc_subj    structural  subject noun of a depth-1 object-relative clause (after Rel Det)
    rc_verb    structural  verb of a depth-1 relative clause (after Rel, or Rel Det N [RC2])
    rc_obj     structural  object noun of a subject-relative clause (after Rel Vt Det)
    deep_subj  structural  subject noun of the depth-2 clause   (deep-embedded)
    deep_verb  structural  verb of the depth-2 clause, first of the stacked verbs (deep-embedded)
    intens     structural  "very", before a gradable adjective
    end        structural  the final "."
DEEP_ROLES = (deep_subj, deep_verb) are the "deep-embedded" roles the probe reports.

Public API
    VOCAB, ROLES, ROLE_KIND, DEEP_ROLES, FUNCTION_WORDS, LEXICON[grammar][class]
    sample(grammar, n, seed) -> list of (words, roles); same seed -> same role sequences in
        A and B (and the same word indices: B is A with its content words swapped)
    split(n_train, n_val, n_test, seed) -> {'A': {'train','val','test'}, 'B': {...}}: distinct
        sentences, no sentence shared between train, val and test (val is for tuning)
    encode(sentences) -> (word ids (N, T) int64, role ids (N, T) int64, lengths (N,)), padded

Run `python grammar.py` to print a few aligned A/B sentences and the corpus statistics.
"""

if __name__ == "__main__":  # the demo at the end: a Ctrl-C from the first second is one line and exit 130, as in every
    import os, signal       # command (cli.exit_on_ctrl_c, SIGINT unblocked if held; a model file imports no plumbing)
    signal.signal(signal.SIGINT, lambda *_: os._exit(os.write(2, b"grammar.py: interrupted (Ctrl-C)\n") and 130))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
import random

import torch

# --- lexicon ---------------------------------------------------------------------------------

DETS = ["the", "a", "this", "every", "my"]
RELS = ["that", "which"]  # subject-relative, object-relative
PREPS = ["in", "on", "near", "under", "behind", "with"]
FUNCTION_WORDS = DETS + RELS + PREPS + ["very", "."]  # shared by A and B (15)

# No content word starts with a vowel, so "a" is always right ("a big dog", never "a old").
# Adjectives come in two index groups of N_GRADABLE: 0..7 gradable (size, age, temper: they
# take "very" and come first), 8..15 descriptive (colour, pattern, coat: no "very", second),
# so two adjectives are always different, in English order, and never antonyms.
LEXICON = {
    "A": {  # animals
        "noun": ["dog", "cat", "fox", "wolf", "bear", "deer", "horse", "mouse", "rabbit", "lion",
                 "tiger", "raven", "badger", "snake", "frog", "duck", "goat", "sheep", "cow", "pig",
                 "hawk", "heron", "seal", "crow", "bee", "mole"],
        "adj": ["big", "small", "young", "hungry", "sleepy", "fierce", "gentle", "lazy",
                "brown", "grey", "black", "white", "spotted", "striped", "furry", "shaggy"],
        "vt": ["chases", "bites", "sees", "follows", "hunts", "watches", "licks", "feeds",
               "scares", "finds", "smells", "grabs", "catches", "nudges", "greets", "kicks",
               "hears", "stalks"],
        "vi": ["sleeps", "runs", "barks", "hops", "swims", "growls"],
    },
    "B": {  # vehicles
        "noun": ["car", "truck", "bus", "van", "train", "tram", "bike", "taxi", "jeep",
                 "tractor", "plane", "jet", "boat", "ship", "yacht", "ferry", "scooter", "wagon",
                 "sedan", "coupe", "lorry", "rocket", "drone", "glider", "canoe", "trailer"],
        "adj": ["heavy", "silent", "noisy", "cheap", "fancy", "sleek", "sturdy", "speedy",
                "new", "red", "blue", "green", "shiny", "rusty", "dented", "diesel"],
        "vt": ["tows", "passes", "hits", "blocks", "overtakes", "bumps", "rams", "pulls", "loads",
               "hauls", "lifts", "drags", "escorts", "refuels", "fixes", "trails", "scrapes",
               "tugs"],
        "vi": ["stalls", "honks", "idles", "brakes", "speeds", "skids"],
    },
}
N_GRADABLE = 8  # adjectives 0..7 of each lexicon are gradable (see above)
CLASSES = ("noun", "adj", "vt", "vi")
GRAMMARS = ("A", "B")
VOCAB = FUNCTION_WORDS + [w for g in GRAMMARS for c in CLASSES for w in LEXICON[g][c]]
WORD_ID = {w: i for i, w in enumerate(VOCAB)}

ROLES = ["subj_det", "subj_adj", "subj", "verb", "obj_det", "obj_adj", "obj", "prep", "pp_det",
         "pp_adj", "pobj", "rel", "rc_det", "rc_subj", "rc_verb", "rc_obj", "deep_subj",
         "deep_verb", "intens", "end"]
ROLE_ID = {r: i for i, r in enumerate(ROLES)}
CONTENT_ROLES = ("subj_adj", "subj", "obj_adj", "obj", "pp_adj", "pobj")
ROLE_KIND = {r: ("content" if r in CONTENT_ROLES else "structural") for r in ROLES}
DEEP_ROLES = ("deep_subj", "deep_verb")

assert len(VOCAB) == 147 and len(set(VOCAB)) == 147, "VOCAB must be 147 distinct words"
assert len(ROLES) == 20
assert all(len(LEXICON["A"][c]) == len(LEXICON["B"][c]) for c in CLASSES)  # aligned RNG draws

# --- sampling --------------------------------------------------------------------------------

P_ADJ = (0.5, 0.3, 0.2)  # number of adjectives 0, 1, 2 in a main-clause or PP noun phrase
P_VERY = 0.2             # "very" before a gradable adjective
P_TRANSITIVE = 0.7       # main verb transitive (else intransitive)
P_RC = 0.35              # a subject or object NP carries a relative clause
P_OBJ_REL = 0.6          # given an RC: object-relative (else subject-relative)
P_DEEP = 0.5             # given an object-relative RC: it holds a centre-embedded RC2
P_PP_SUBJ = 0.1          # a PP modifies the subject NP (when it has no RC)
P_PP_END = 0.35          # a PP closes the verb phrase


class _Sampler:
    """Draws one sentence. Every random choice is made on indices (word k of a class), so the
    draw sequence, and hence the role sequence, does not depend on the lexicon."""

    def __init__(self, lex, rng):
        self.lex, self.rng, self.words, self.roles = lex, rng, [], []

    def emit(self, word, role):
        self.words.append(word)
        self.roles.append(role)

    def pick(self, cls):
        options = DETS if cls == "det" else RELS if cls == "rel" else PREPS if cls == "prep" \
            else self.lex[cls]
        return options[self.rng.randrange(len(options))]

    def adjective(self, lo, hi, role):
        """One adjective of index lo..hi-1, after "very" (P_VERY) when it is gradable."""
        k = lo + self.rng.randrange(hi - lo)
        if k < N_GRADABLE and self.rng.random() < P_VERY:
            self.emit("very", "intens")
        self.emit(self.lex["adj"][k], role)

    def full_np(self, det_role, adj_role, noun_role):
        """Det Adj? N | Det AdjGradable AdjDescriptive N: the main-clause and PP noun phrase."""
        self.emit(self.pick("det"), det_role)
        n_adj = self.rng.choices((0, 1, 2), weights=P_ADJ)[0]
        if n_adj == 1:
            self.adjective(0, len(self.lex["adj"]), adj_role)
        elif n_adj == 2:  # "the very big brown dog": two different adjectives, in English order
            self.adjective(0, N_GRADABLE, adj_role)
            self.adjective(N_GRADABLE, len(self.lex["adj"]), adj_role)
        self.emit(self.pick("noun"), noun_role)

    def pp(self):
        self.emit(self.pick("prep"), "prep")
        self.full_np("pp_det", "pp_adj", "pobj")

    def rc(self):
        if self.rng.random() < P_OBJ_REL:  # which the cat [which the fox sees] chases
            self.emit("which", "rel")
            self.emit(self.pick("det"), "rc_det")
            self.emit(self.pick("noun"), "rc_subj")
            if self.rng.random() < P_DEEP:
                self.emit("which", "rel")
                self.emit(self.pick("det"), "rc_det")
                self.emit(self.pick("noun"), "deep_subj")
                self.emit(self.pick("vt"), "deep_verb")
            self.emit(self.pick("vt"), "rc_verb")
        else:  # that chases the cat
            self.emit("that", "rel")
            self.emit(self.pick("vt"), "rc_verb")
            self.emit(self.pick("det"), "rc_det")
            self.emit(self.pick("noun"), "rc_obj")

    def sentence(self):
        self.full_np("subj_det", "subj_adj", "subj")
        if self.rng.random() < P_RC:
            self.rc()
        elif self.rng.random() < P_PP_SUBJ:
            self.pp()
        if self.rng.random() < P_TRANSITIVE:
            self.emit(self.pick("vt"), "verb")
            self.full_np("obj_det", "obj_adj", "obj")
            if self.rng.random() < P_RC:
                self.rc()
        else:
            self.emit(self.pick("vi"), "verb")
        if self.rng.random() < P_PP_END:
            self.pp()
        self.emit(".", "end")
        return self.words, self.roles


def _check_grammar(grammar):
    if grammar not in GRAMMARS:
        raise ValueError(f"grammar must be 'A' (animals) or 'B' (vehicles), got {grammar!r}")


def sample(grammar, n, seed):
    """n sentences of `grammar` as (words, roles) lists; a pure function of (n, seed), and the
    role sequences (and word indices) are the same for 'A' and 'B' under one seed."""
    _check_grammar(grammar)
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    rng = random.Random(seed)
    return [_Sampler(LEXICON[grammar], rng).sentence() for _ in range(n)]


def split(n_train, n_val, n_test, seed=0):
    """Distinct sentences for train / val / test, aligned across A and B.

    Sentences are drawn from one stream and kept only the first time they occur, so no
    sentence appears in two splits (nor twice in one). Because B is A with its content words
    swapped index-for-index, de-duplicating on A de-duplicates B too, and
    out['B'][s][i] has the same roles as out['A'][s][i]. Returns
    {'A': {'train': [...], 'val': [...], 'test': [...]}, 'B': {...}}.
    """
    need = n_train + n_val + n_test
    rng_a, rng_b = random.Random(seed), random.Random(seed)
    seen, keep = set(), {"A": [], "B": []}
    for _ in range(50 * need + 1000):  # the space is ~1e9 sentences: duplicates are rare
        if len(keep["A"]) == need:
            break
        a, b = _Sampler(LEXICON["A"], rng_a).sentence(), _Sampler(LEXICON["B"], rng_b).sentence()
        key = " ".join(a[0])
        if key not in seen:
            seen.add(key)
            keep["A"].append(a)
            keep["B"].append(b)
    if len(keep["A"]) < need:
        raise ValueError(f"could not draw {need} distinct sentences; ask for fewer")
    cuts = {"train": (0, n_train), "val": (n_train, n_train + n_val),
            "test": (n_train + n_val, need)}
    return {g: {s: keep[g][i:j] for s, (i, j) in cuts.items()} for g in GRAMMARS}


def encode(sentences):
    """(words, roles) pairs -> word ids (N, T), role ids (N, T) padded with -1, lengths (N,)."""
    N = len(sentences)
    T = max((len(w) for w, _ in sentences), default=0)
    ids = torch.full((N, T), -1, dtype=torch.long)    # (N, T)
    roles = torch.full((N, T), -1, dtype=torch.long)  # (N, T)
    lengths = torch.zeros(N, dtype=torch.long)        # (N,)
    for i, (words, rs) in enumerate(sentences):
        ids[i, :len(words)] = torch.tensor([WORD_ID[w] for w in words])
        roles[i, :len(rs)] = torch.tensor([ROLE_ID[r] for r in rs])
        lengths[i] = len(words)
    return ids, roles, lengths


if __name__ == "__main__":
    a, b = sample("A", 5, seed=1), sample("B", 5, seed=1)
    for (wa, ra), (wb, _) in zip(a, b):
        print(" ".join(wa) + "\n" + " ".join(wb) + "\n  " + " ".join(ra) + "\n")
    many = sample("A", 10000, seed=0)
    counts = {r: 0 for r in ROLES}
    for _, rs in many:
        for r in rs:
            counts[r] += 1
    total = sum(counts.values())
    print(f"{len(VOCAB)} words, {len(ROLES)} roles, mean length {total / len(many):.1f} words")
    print("  ".join(f"{r} {c / total:.3f}" for r, c in counts.items()))
