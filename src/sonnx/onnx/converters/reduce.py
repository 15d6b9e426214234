"""Importer registrations for reduce: see sonnx.autograd.reduce."""
