"""Analysis: records in, tables, plots, comparisons and predictions out; no torch."""
