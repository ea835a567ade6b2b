"""The language-modelling track: byte-level models trained short on real text and code and
scored in bits per byte far past the training length (docs/lm.md)."""
