"""Importer registrations for elementwise: see sonnx.autograd.elementwise."""
