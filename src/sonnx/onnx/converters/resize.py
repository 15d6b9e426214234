"""Importer registrations for resize: see sonnx.autograd.resize."""
