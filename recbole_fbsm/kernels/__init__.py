"""Sparse kernels on torch tensors (CSR rows, embedding bags, bounded sorts), apart from the models' math."""
