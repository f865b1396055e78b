"""Grading the exercises without trusting them: checks defined once, learner code run in a child process.

The grader (trusted) builds each check's inputs from fixed seeds and its expected result from the minilin
reference; a child process (untrusted: `child.py`, in `bwrap` where available) imports the learner's file,
calls the function and sends the outputs back; the grader compares them and scores. One module per concern:

    calls       what crosses the process boundary: a Call (function name, inputs), placeholders, value encoding
    checks      the check language (close / equal / raises / check), Task and Chapter
    exNN_*      the checks of each exercise file (the single definition, also used by tests/exercises)
    course      the chapters with exercises, task lookup, hidden (teacher) checks
    honesty     static scans of a learner's file: forbidden minilin helpers, pristine stubs
    sandbox     the child's command line (bwrap or plain) and limits
    runner      runs one submission through child processes; also the in-process runner for pytest
    pipe        the grader's end of a child process: its framed pipe, and how it ended (ChildGone)
    submission  finds a submission's files when they are misnamed or one folder too deep
    report      the learner's table, the gradebooks (long, wide), feedback, Gradescope's results.json
    rubric      points per task and weights per check (partial credit: a task earns its passed checks' share)
    release     the student copy of the course (no solutions, a GitHub Classroom workflow), the Gradescope bundle
    classroom   the Classroom workflow's grading step: one run, one result per task for the grading reporter
"""
