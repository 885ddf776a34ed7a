# The values deploy/ci-checkov.sh checks an environment with besides its defaults: CMEK on
# (infra/terraform/README.md, "Customer-managed encryption keys"), so that the keys' grants,
# which exist only then, are checked too.
cmek = { enabled = true, rotation_period = "7776000s" }
