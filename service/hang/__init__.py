"""Hung jobs: which rank did not enter, or did not finish, the collective the others wait in (#45 item 4)."""
