"""The rnn operators."""
