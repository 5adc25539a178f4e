"""The lab's exercises: ten functions to write and one question to answer in words. Each
function raises NotImplementedError until you replace it with your code; the notebook (lab.ipynb)
calls `check(NAME, ...)` on each, and checks.py says what the check tests. Tags, as the
notebook's table gives them: difficulty and importance out of 5 (●●○○○), then the minutes to spend.

Where to write: in this file (re-run the check cell: the notebook reloads it by itself), or in a
notebook cell under `@H.answer` (the cell's function then replaces this file's, and survives the
reloads: see the notebook's "How to work"). On Colab this file lives in the runtime and is lost
when the runtime resets: download it (right-click it in the file browser) before you leave.

Check everything at once, outside the notebook: `python -m lab.grader` (one line per exercise).
"""
import torch  # noqa: F401  (what the answers may use: torch, math, zlib, bz2, lzma, ema)


def effective_window(alpha, mass=0.9):
    """Exercise 1 (difficulty ●●○○○, importance ●●●○○, about 7 min).
    The effective window of an EMA trace of decay `alpha`.

    The trace h_t = (1 - a) h_{t-1} + a x_t weighs the input j steps back by a (1 - a)^j.
    Return the smallest integer k >= 1 such that the k most recent inputs carry at least
    `mass` of the total weight: sum_{j=0}^{k-1} a (1 - a)^j >= mass.
    Raise ValueError unless 0 < alpha <= 1 and 0 < mass < 1.
    (alpha = 0.5, mass = 0.75 -> 2; mind floating point at the boundary. A loop over k serves the
    lab's decays; the closed form k = log(1 - mass) / log(1 - alpha), rounded up, serves any.)"""
    raise NotImplementedError("exercise 1: effective_window")


def same_state(alphas, x):
    """Exercise 2 (difficulty ●●●○○, importance ●●●●○, about 9 min). Two pasts, one state.

    x: a float64 tensor (T,), one channel's inputs x_0 .. x_{T-1}. The S traces' state after them
    is V @ x with V = ema.trace_map(alphas, T), V[s, j] = a_s (1 - a_s)^(T-1-j). Return another
    input sequence x2 (T,), float64, with ||x2 - x|| = 1 and exactly (to rounding) the same
    final state: V @ x2 == V @ x. Raise ValueError if T <= S (then V, with distinct decays, is
    one-to-one: no second past exists). Hint: torch.linalg.svd."""
    raise NotImplementedError("exercise 2: same_state")


def probe_accuracy(X_train, y_train, X_test, y_test, l2=1e-3):
    """Exercise 3 (difficulty ●●●○○, importance ●●●○○, about 9 min).
    A linear probe: how much of a label can a linear map read?

    X_* (N, F) float features, y_* (N,) int labels in [0, R). Fit on the training rows only:
    standardise each feature with the training mean and std (+ 1e-3 in the std), append a
    constant 1, and solve ridge regression onto one-hot labels,
        W = (Z^T Z + l2 N I)^-1 Z^T Y,
    then predict argmax(Z_test W). Return the test accuracy as a float in [0, 1]."""
    raise NotImplementedError("exercise 3: probe_accuracy")


def mqar_sequence(keys, values, slots, T, blank):
    """Exercise 4 (difficulty ●●○○○, importance ●●○○○, about 6 min).
    One multi-query associative recall sequence, as recall.mqar builds it.

    keys, values, slots: int tensors (N,). Return idx (T,) and targets (T,), both torch.long:
    idx holds the pairs k_1 v_1 k_2 v_2 ... k_N v_N at positions 0 .. 2N-1, then key i again at
    position slots[i] (the query), and `blank` everywhere else; targets is -1 everywhere except
    at slots[i], where it is values[i] (the answer). Raise ValueError if a slot is inside the
    pairs (< 2N) or past the end (>= T), or two slots coincide."""
    raise NotImplementedError("exercise 4: mqar_sequence")


def binding(acc, N):
    """Exercise 5a (difficulty ●○○○○, importance ●●●○○, about 2 min).
    The binding score of a recall accuracy `acc` at N pairs:
    0 at 1/N (a reader that knows which values occur but not which key each belongs to), 1 at
    perfect recall, linear in between (negative below 1/N). Raise ValueError if N < 2."""
    raise NotImplementedError("exercise 5a: binding")


def recalled_pairs(acc, N):
    """Exercise 5b (difficulty ●●○○○, importance ●●●○○, about 3 min).
    A reader that knows r of the N pairs exactly and, for every
    other query, guesses uniformly among the N - r values it cannot place, scores
    acc = (r + 1) / N on average. Return the r that accuracy `acc` at N pairs implies, as a float:
    r is an average over sequences (0.3 at N = 8 -> 1.4), not a whole number, so do not round.
    (A perfect reader at N = 8 gives r = 7: knowing 7 pairs, the 8th value is the only one left.)
    Raise ValueError if N < 2."""
    raise NotImplementedError("exercise 5b: recalled_pairs")


ANSWER_5C = """Exercise 5c (written; difficulty ●●●○○, importance ●●●●●, about 7 min). What does
softmax_state hold, and why does its recall not grow with more decays? (Two or three sentences
here; your instructor has a model answer and the rubric.)
"""


def ema_kv_step(q, k, v, M, alphas):
    """Exercise 6a (difficulty ●●●○○, importance ●●●●●, about 6 min). One token of `ema_kv`:
    the paper's decays writing key-value pairs instead of adding up the inputs.

    q, k, v: float64 tensors (D,), this token's query, key and value. M: (S, D, D), one D x D
    state per decay a_s of `alphas`, key index first (M[s] is a sum of weighted k v^T).
    READ first, from the state as it came in, with the same query for every decay:
        y = sum_s M[s]^T q                          (D,)
    THEN decay each state and write this token's pair:
        M_new[s] = (1 - a_s) M[s] + a_s k v^T       (S, D, D)
    Return (y, M_new). (torch.outer(k, v) is k v^T; M.transpose(-1, -2) transposes every M[s].)"""
    raise NotImplementedError("exercise 6a: ema_kv_step")


def delta_step(q, k, v, beta, M):
    """Exercise 6b (difficulty ●●●○○, importance ●●●●●, about 5 min). One token of the delta rule
    (DeltaNet): no decay; the state is corrected toward this token's value at this token's key.

    q, k: unit float64 tensors (D,), v (D,), beta a number in (0, 1], M (D, D) value index first
    (M k is the value the state holds at key k). READ first, from the state as it came in:
        y = M q                                     (D,)
    THEN correct what the state holds at k toward v, by the fraction beta:
        M_new = M + beta (v - M k) k^T              (D, D)
    Return (y, M_new)."""
    raise NotImplementedError("exercise 6b: delta_step")


def compressor_nats_per_byte(data):
    """Exercise 7 (difficulty ●○○○○, importance ●●○○○, about 5 min).
    General-purpose compressors as yardsticks of a byte loss.

    data: bytes. Return {"zlib": ., "bz2": ., "lzma": .}: each compressor's output size at its
    strongest standard setting (zlib level 9, bz2 level 9, lzma preset 9 | lzma.PRESET_EXTREME)
    as nats per input byte: a code of c bytes for n bytes costs 8 ln 2 c / n nats per byte.
    Raise ValueError for empty data."""
    raise NotImplementedError("exercise 7: compressor_nats_per_byte")


def seed_verdict(a, b, paired, alpha=0.01):
    """Exercise 8 (difficulty ●●○○○, importance ●●●●●, about 8 min). Is model A below model B,
    above it, or is the gap the seeds' noise?

    a, b: lists of per-seed losses of two models (one number per seed). paired: True when a_i and
    b_i are a matched pair, sharing what moves both losses the same way (their losses correlate
    across i): then work with the differences d_i = a_i - b_i, which cancel it; else compare the
    two samples as they are (Welch). Return (diff, se, verdict):
        diff = mean(a) - mean(b)
        se   = std(d) / sqrt(n)                        paired (std with n - 1)
               sqrt(var(a) / n_a + var(b) / n_b)       Welch  (var with n - 1)
        verdict = "below" if the two-sided t-test's p is < alpha and mean(a) < mean(b),
                  "above" if that p is < alpha and mean(a) > mean(b),
                  "tie" otherwise
    (scipy.stats.ttest_rel, or ttest_ind with equal_var=False, give that p: their default is two-sided.
    Not a one-sided p each way: that is a two-sided test at 2 alpha.) Raise ValueError if a or b has
    fewer than 2 seeds (one seed has no spread: no verdict), or paired and len(a) != len(b)."""
    raise NotImplementedError("exercise 8: seed_verdict")
