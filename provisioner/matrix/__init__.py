"""The compatibility matrix: loading and validating matrices/*.yaml with overlays, YAML with lines, version orderings, the JSON cache."""
