"""How a run executes: processes (``distributed``), torch's threads (``threads``; ``openmp``, before torch loads)
and the heap between phases (``memory``)."""
