import sys

from provisioner.demo import main

sys.exit(main())
