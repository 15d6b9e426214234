"""The randomness operators."""
