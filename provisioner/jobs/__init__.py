"""Framework jobs: a small YAML job file -> validated JobPlan -> step scripts rendered from templates/jobs/.

    spec      read and check the job file (errors name file:line)
    model     the model's shape from its config.json, parameter count
    catalog   job kinds, frameworks, model types and data formats from matrices/jobs.yaml; which stack
              carries which framework
    memory    the per-chip memory estimate a job is checked against the card's HBM
    disk      what a job writes under its output (checkpoints kept, weights, export) and whether it fits
    dataconv  data conversions a job runs before preprocessing (orz); shipped into the job as tools/dataconv.py,
              standard library only
    plan      everything validated together -> JobPlan (paths, steps, rendered scripts and configs)
    render    the JobPlan's files from templates/jobs/ (the shq / json / num filters, the template context,
              the Ray ports)
    k8s       Volcano Job (torchrun / msrun jobs) and KubeRay RayJob (GRPO) manifests for a JobPlan

`provision launch --job` (provisioner.launch.jobrun) runs a JobPlan in Docker; `provision k8s --job`
renders it for a cluster. Nothing here talks to Docker.
"""
