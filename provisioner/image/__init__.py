"""Stack + recipe -> byte-stable build context (templates, package locks, project source) -> image (build, progress, labels)."""
