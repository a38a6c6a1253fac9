"""Stack diffs and host upgrade plans (`provision diff`, `provision upgrade`): what changes between two stacks,
what each change breaks or needs (matrices/upgrade.yaml and the other files' own rows), and the ordered steps that
take a host from its driver and CANN to a target stack."""
