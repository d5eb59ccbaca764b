"""Foundation: routing trees, MACs, costs, execution, policies, TALR, reach probabilities."""
