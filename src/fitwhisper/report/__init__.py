"""The HTML report of a run, an evaluation, or two of them side by side
(`fitwhisper report RUN_DIR [OTHER]`), also written at the end of `train` and of
`evaluate --output_dir`.

- `write`: the page written (`write_report`), its output checked, and written quietly at
  the end of `train` and `evaluate`
- `gather`: a run or evaluation folder's files read into the page's data
- `clips`: the clip table (alignment, audio, duration, speaker, hallucination signs)
- `stats`: paired-bootstrap interval, error rate by duration and by speaker
- `compare`: two folders, clip by clip
- `render`: one self-contained HTML file (assets/: page.js, page.css, uPlot)
- `unreadable`: the files a page could not read, named
"""

from fitwhisper.report.write import REPORT_FILE, check_report_output, report_quietly, write_report

__all__ = ["REPORT_FILE", "check_report_output", "report_quietly", "write_report"]
