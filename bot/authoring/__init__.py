"""Tools for the people who write the knowledge base: its examples run as tests (`inferbot kb
test`, `kb validate`), the JSON Schema of each KB file for editors (`kb schema`), and the page of
names a cause or fix may use. They run whole diagnoses, so they sit above the core.
"""
