"""Importer registrations for cast: see sonnx.autograd.cast."""
