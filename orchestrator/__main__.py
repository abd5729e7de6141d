import sys

from orchestrator.cli.entry import main

sys.exit(main())
