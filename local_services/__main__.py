import sys

from local_services.cli import main

sys.exit(main())
