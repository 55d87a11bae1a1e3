"""Training of SpecViz's draft heads: data building, EAGLE-1, EAGLE-3, Medusa and SpS trainers."""
