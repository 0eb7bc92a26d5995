"""LMDeploy's PyTorch engine as a target: its block allocator, checked as a pool."""
