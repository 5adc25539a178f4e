"""The old home of four ideas, each moved beside its kin: the --out_dir checks to the run folder
(checkpoint.check_out_dir, make_out_dir), figures and mean ± std to the reports (tables.pyplot,
tables.mean_std), the worker pool to the grid cache (grid.run_jobs, JobFailed). The names stay
importable from here for the callers outside this package that still use them (bench.py,
dev/map.py, lab/helpers.py); new code imports them from their homes, and this file goes once
those callers do.

Run: nothing to run.
"""

import tempfile  # noqa: F401 (tests/test_lab.py patches lab.helpers.runs.tempfile.mkdtemp)

from plumbing.checkpoint import check_out_dir, make_out_dir  # noqa: F401 (re-exported)
from plumbing.grid import JobFailed, run_jobs  # noqa: F401
from plumbing.tables import mean_std, pyplot  # noqa: F401
