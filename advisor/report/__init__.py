"""The HTML recommendation report."""
