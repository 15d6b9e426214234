"""Importer registrations for normalization: see sonnx.autograd.normalization."""
