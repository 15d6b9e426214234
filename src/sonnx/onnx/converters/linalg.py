"""Importer registrations for linalg: see sonnx.autograd.linalg."""
