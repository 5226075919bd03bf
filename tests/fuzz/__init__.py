"""The fuzz suite: strategies per format from the contract, hostile folders, the check and ``make fuzz``."""
