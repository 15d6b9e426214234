"""Importer registrations for loss: see sonnx.autograd.loss."""
