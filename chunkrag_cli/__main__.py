import sys

from chunkrag_cli.main import main

sys.exit(main())
