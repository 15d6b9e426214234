"""Importer registrations for conv: see sonnx.autograd.conv."""
