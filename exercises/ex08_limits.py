"""Exercises for notebook 08: where low rank fails.

Implement each function, then grade yourself:  python -m minilin grade --chapter 8
Shapes follow the course convention: values v (B, H, M, Dv); a map over positions is (rows, positions).
Only minilin.attention.softmax_attention may be called here (not minilin.lowrank, nor minilin.linformer).
Task 8.1 is the core task; Task 8.2 is optional. No notebook cell solves either.

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import torch

from minilin.attention import softmax_attention  # allowed here (Task 8.2 may build its copy with it)


def convex_copy_map(sources, k):
    """Task 8.1: a rank-k map of Linformer's form that copies more letters than block averaging.

    sources: (S,) long tensor, a permutation of 0..S-1 (answer slot j must read position sources[j]); k: an int,
    2 <= k < S  ->  (A, F): A (S, k) floating, every entry >= 0 and every row summing to 1 (what a softmax over k
    slots gives); F (k, S) floating, any real numbers. Their product A F is the map over positions, of rank at most k.
    The grader draws sequences of S letters from a 16-letter alphabet and decodes each slot as section 4 does: slot
    j answers the letter with the largest total weight in row j of A F. It also builds section 4's block averaging
    in this form (k groups of neighbouring slots, each reading the average of its group's sources) and decodes it on
    the same letters. Your
    map passes when it keeps at least 0.1 more of the letters than block averaging (at S = 63, k = 16: about
    0.34). Section 4's random map keeps 0.66 there, but its A would need negative weights: it is not of this form.

    Hint 1 (nudge): the decode takes an argmax in each row, so multiplying a row by a positive number changes
        nothing. How close to the random map can you get if its rows may come back each scaled by its own factor?
    Hint 2 (plan): find a map that decodes well and breaks the form only because some of A's entries are
        negative. Then look for a change to A that makes its rows non-negative and sum to one while leaving every
        row's argmax in A F where it was.
    Hint 3 (formula): row j of A F is the sum over the k slots of A[j, s] F[s]. What does a constant added to
        every entry of a row of A do to that row of A F?
    """
    raise NotImplementedError("Task 8.1")


def copy_sharpness(v, positions, tol):
    """Task 8.2 (optional): how sharp must a copying Linformer's scores be?

    v: (B, H, M, Dv), positions: a list of `slots` distinct ints in 0..M-1, tol: a float > 0  ->  a Python float
    A Linformer copies chosen positions when E = F select them (row j of E holds a 1 at position positions[j]) and
    query j's scaled scores are s on projected slot j and 0 on every other projected slot: its output
    softmax(scores) (F v) tends to v[..., positions, :] as s grows, but a softmax never reaches it. Return the
    smallest s >= 0 at which every entry of that output is within `tol` of v[..., positions, :] (to 1e-6 in s; 0.0
    when s = 0 already meets it). Predict first: for v ~ N(0, 1), 16 slots and tol 1e-3, is s nearer 5, 10 or 50,
    and how does it grow with the number of slots?
    Extends notebook 08's appendix on a copying Linformer, whose queries do not fully single out their slot unaided: how
    large must the gap between the own score and the others be, for a copy to a given precision?

    Hint 1 (nudge): nothing here needs training. At sharpness s every row puts one weight on its own slot and
        another, equal, weight on each other slot. How do those weights move as s grows?
    Hint 2 (plan): build the (slots x slots) weights for a given s, apply them to the chosen values, and take the
        largest error over batch, head, row and feature; the error only falls as s grows, so find the smallest s
        that meets tol, by bisection or by solving.
    Hint 3 (formula): a softmax over the slots with s on the own slot and 0 elsewhere gives each other slot
        weight one over (e to the s, plus slots minus one); since a row's weights sum to one, its error is a
        weighted sum of differences between chosen values.
    """
    raise NotImplementedError("Task 8.2")
