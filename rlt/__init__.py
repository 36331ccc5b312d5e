"""rlt: run, check and extend the experiments of the Recurrent Looped Transformer report."""

from rlt import portable
from rlt.allocator import keep_freed_memory

__version__ = "0.1.0"

# Freed memory stays in the process instead of being faulted in again every training step
# (rlt/allocator.py; RLT_MALLOC=off switches it off).
keep_freed_memory()
# One CPU code path on every x86-64 host with AVX2 (rlt/portable/; RLT_PORTABLE=0 switches it
# off); before torch runs.
portable.pin()
