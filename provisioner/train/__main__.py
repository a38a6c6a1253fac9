import sys

from provisioner.train.cli import main

sys.exit(main())
