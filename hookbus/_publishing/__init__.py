"""The framework-free publisher side: the core every publisher shares (step, plan, publish), the planner, and replay."""
