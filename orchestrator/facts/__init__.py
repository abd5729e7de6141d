"""Probe data and text evidence -> the normalized facts sections (pure), and the GPU model table."""
