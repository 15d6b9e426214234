"""Importer registrations for pooling: see sonnx.autograd.pooling."""
