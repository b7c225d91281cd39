"""Mounted resources: a script reads and searches a folder it can see but not change.

Run: python examples/mounted_resources.py
"""

import tempfile
from pathlib import Path

from svit import Mount, Process
from svit.errors import SvitError

SURVEY = """
(define (main input)
  (let ((found (search "/mounts/docs" "TODO")))
    (do (write "/memory/todo-count" (value-get found "/matches/0/line"))
        (value-map "files" (discover "/mounts/docs")
                   "first" (value-get found "/matches/0/path")))))
"""

with tempfile.TemporaryDirectory() as folder:
    root = Path(folder)
    (root / "guide.md").write_text("# Guide\nTODO: write the guide\n")
    (root / "notes.txt").write_text("nothing to do here\n")
    process = (
        Process.builder("svit://local/examples/mounted")
        .mount("docs", Mount.folder(root))
        .library("survey", SURVEY)
        .build()
    )
    result = process.exec("/lib/survey", None).output
    try:
        process.write("/mounts/docs/guide.md", "overwritten")
        denied = "no"
    except SvitError as error:
        denied = error.code
    in_snapshot = b"write the guide" in process.snapshot()
    print(f"mounted-resources: files={','.join(result['files'])} first={result['first']} write={denied} content_in_snapshot={in_snapshot}")
