"""What the analysis judges: finding rules over sessions and figures (each a ``Finding`` of a declared kind),
the verdict every report opens with, the CI gates."""
