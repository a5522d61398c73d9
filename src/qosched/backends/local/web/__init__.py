"""The local service's web page: its sign-in (``auth``), the JSON views only the page needs
(``views``) and its static files (``static/``, shipped inside the package, no build step)."""
