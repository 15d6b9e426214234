"""Importer registrations for activations: see sonnx.autograd.activations."""
