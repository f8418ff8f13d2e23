"""How a run executes: processes (``distributed``: torch.distributed groups, rank shares, broadcasts)."""
