"""The HTML fleet report: fleet.json in, one self-contained HTML page out."""

from orchestrator.present.report.render import ReportError, render_report, write_report

__all__ = ["ReportError", "render_report", "write_report"]
