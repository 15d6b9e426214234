"""Importer registrations for indexing: see sonnx.autograd.indexing."""
