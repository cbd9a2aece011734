#!/usr/bin/env python3
"""Validates OSCAL assessment results (JSON) with compliance-trestle's models of NIST's OSCAL
schema (hack/install-test-tools.sh installs the pinned package in a cached venv).

Usage: validate-oscal.py FILE  (exit status 0: valid; 1: invalid, with the errors)
"""

import json
import sys

from trestle.oscal import OSCAL_VERSION
from trestle.oscal.assessment_results import AssessmentResults

doc = json.load(open(sys.argv[1]))
try:
    AssessmentResults.model_validate(doc["assessment-results"])
except Exception as error:  # pydantic's ValidationError, or a missing root key
    print(f"invalid OSCAL {OSCAL_VERSION} assessment results: {error}")
    sys.exit(1)
print(f"valid OSCAL {OSCAL_VERSION} assessment results")
