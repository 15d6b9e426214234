"""Importer registrations for attention: see sonnx.autograd.attention."""
