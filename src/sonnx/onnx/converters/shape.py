"""Importer registrations for shape: see sonnx.autograd.shape."""
