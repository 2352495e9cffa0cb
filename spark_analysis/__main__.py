import sys

from spark_analysis.cli import main

sys.exit(main())
