"""documents-*: read CSV, Excel, Word, PowerPoint, PDF and text files from the workspace.

Each reader returns markdown-ish text and takes a selection (rows, sheet and cell range,
paragraphs, slides, pages, lines), so a model can page through a large file instead of getting
it cut off; whatever still exceeds ``DOC_MAX_CHARS`` is cut with a note saying how to see more.
Parsing runs in a worker thread so a large file does not stall other sessions.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any, BinaryIO

from pydantic import Field

from aworld_gaia_env.errors import ToolError
from aworld_gaia_env.tools.base import Args, ToolContext, tool, truncate
from aworld_gaia_env.tools.html_text import html_to_text

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def parse_selection(spec: str | None, count: int, unit: str) -> list[int]:
    """``"1-3,5"`` as 1-based numbers within ``1..count`` (all when ``spec`` is empty)."""
    if count == 0:
        return []
    if not spec or not spec.strip() or spec.strip().lower() == "all":
        return list(range(1, count + 1))
    chosen: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                first, last = (int(x) for x in part.split("-", 1))
            else:
                first = last = int(part)
        except ValueError:
            raise ToolError(f"bad {unit} selection {spec!r}: use numbers and ranges like '1-3,5'") from None
        if first < 1 or last > count or first > last:
            raise ToolError(f"{unit} selection {spec!r} is out of range: the document has {count} {unit}s (1-{count})")
        chosen.extend(range(first, last + 1))
    return chosen


def markdown_table(rows: list[list[Any]]) -> str:
    if not rows:
        return "(empty)"
    width = max(len(r) for r in rows)
    cells = [["" if v is None else str(v).replace("|", "\\|").replace("\n", " ") for v in r] + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * width]
    lines.extend("| " + " | ".join(r) + " |" for r in cells[1:])
    return "\n".join(lines)


def _read_doc(ctx: ToolContext, path: str, suffixes: tuple[str, ...], reader: str, kind: str, fn: Callable[..., str], *extra: Any) -> Any:
    """Open ``path`` race-free (see :mod:`aworld_gaia_env.workspace`) and run ``fn(handle, name, *extra)``
    in a worker thread, so a large file does not stall other sessions."""
    rel = ctx.workspace.relative(path)
    suffix = PurePosixPath(rel).suffix.lower()
    if suffixes and suffix not in suffixes:
        raise ToolError(f"{reader} reads {', '.join(suffixes)} files; {path!r} is not one (pick the matching documents-* tool)")

    def work() -> str:
        with ctx.workspace.open_file(path) as (handle, opened):
            try:
                return fn(handle, PurePosixPath(opened).name, *extra)
            except ToolError:
                raise
            except Exception as exc:
                raise _broken(kind, path, exc) from None

    return asyncio.to_thread(work)


def _broken(kind: str, path: str, exc: Exception) -> ToolError:
    return ToolError(f"could not read {path!r} as {kind}: {type(exc).__name__}: {exc}")


# ---------------------------------------------------------------------------------------------
# CSV
# ---------------------------------------------------------------------------------------------


class CsvArgs(Args):
    path: str = Field(description="File path in the workspace.")
    start_row: int = Field(default=1, ge=1, description="First data row to show (1-based, after the header).")
    max_rows: int = Field(default=100, ge=1, le=5000, description="How many rows to show.")
    delimiter: str | None = Field(default=None, description="Column separator; sniffed when omitted.")


def _read_csv(handle: BinaryIO, name: str, args: CsvArgs, limit: int) -> str:
    raw = handle.read()
    text = raw.decode("utf-8-sig", errors="replace")
    delimiter = args.delimiter
    if not delimiter:
        try:
            delimiter = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    rows = list(csv.reader(io.StringIO(text), delimiter=delimiter))
    if not rows:
        return f"{name}: empty file"
    header, data = rows[0], rows[1:]
    start = args.start_row - 1
    shown = data[start : start + args.max_rows]
    body = markdown_table([header, *shown])
    head = f"{name}: {len(data)} data rows, {len(header)} columns; showing rows {start + 1}-{start + len(shown)}\n\n"
    more = ""
    if start + len(shown) < len(data):
        more = f"\n\n[{len(data) - start - len(shown)} more rows: call again with start_row={start + len(shown) + 1}]"
    return truncate(head + body + more, limit, "use start_row/max_rows to page")


@tool("documents-csv", "read_csv", "Read a CSV/TSV file from the workspace as a markdown table, a page of rows at a time.", CsvArgs)
async def read_csv(ctx: ToolContext, args: CsvArgs) -> str:
    return await _read_doc(ctx, args.path, (".csv", ".tsv", ".txt"), "documents-csv", "CSV", _read_csv, args, ctx.settings.doc_max_chars)


# ---------------------------------------------------------------------------------------------
# Excel
# ---------------------------------------------------------------------------------------------


class XlsxArgs(Args):
    path: str = Field(description="File path in the workspace (.xlsx/.xlsm).")
    sheet: str | None = Field(default=None, description="Sheet name; the first sheet when omitted.")
    cell_range: str | None = Field(default=None, description="A range such as 'A1:D20'; the used range when omitted.")
    max_rows: int = Field(default=200, ge=1, le=10000, description="At most this many rows.")


def _read_xlsx(handle: BinaryIO, name: str, args: XlsxArgs, limit: int) -> str:
    import openpyxl

    book = openpyxl.load_workbook(handle, read_only=True, data_only=True)
    try:
        names = book.sheetnames
        if args.sheet is not None and args.sheet not in names:
            raise ToolError(f"no sheet {args.sheet!r} in {name}; sheets: {names}")
        sheet = book[args.sheet or names[0]]
        if args.cell_range:
            try:
                block = sheet[args.cell_range]
            except ValueError as exc:
                raise ToolError(f"bad cell_range {args.cell_range!r}: {exc}; use the form 'A1:D20'") from None
            if not isinstance(block, tuple):
                block = ((block,),)
            elif block and not isinstance(block[0], tuple):
                block = (block,)
            rows = [[cell.value for cell in row] for row in block]
        else:
            rows = [list(row) for row in sheet.iter_rows(values_only=True)]
        while rows and all(v is None for v in rows[-1]):
            rows.pop()
        total = len(rows)
        shown = rows[: args.max_rows]
        head = (
            f"{name}: sheets {names}; sheet '{sheet.title}'"
            + (f", range {args.cell_range}" if args.cell_range else "")
            + f": {total} rows, showing {len(shown)}\n\n"
        )
        more = f"\n\n[{total - len(shown)} more rows: use cell_range to select them]" if total > len(shown) else ""
        return truncate(head + markdown_table(shown) + more, limit, "use sheet/cell_range to select a part")
    finally:
        book.close()


@tool(
    "documents-xlsx",
    "read_excel",
    "Read an Excel workbook (.xlsx/.xlsm) from the workspace: lists the sheets and shows a sheet or a cell range "
    "as a markdown table (formula cells show their last computed values).",
    XlsxArgs,
)
async def read_excel(ctx: ToolContext, args: XlsxArgs) -> str:
    if args.path.strip().lower().endswith(".xls"):
        raise ToolError(
            f"{args.path!r} is a legacy .xls workbook, which this reader does not open; convert it with the "
            f"terminal (e.g. libreoffice --headless --convert-to xlsx) or read it with pandas in intelligence-code"
        )
    return await _read_doc(
        ctx, args.path, (".xlsx", ".xlsm"), "documents-xlsx", "an Excel workbook", _read_xlsx, args, ctx.settings.doc_max_chars
    )


# ---------------------------------------------------------------------------------------------
# Word
# ---------------------------------------------------------------------------------------------


class DocxArgs(Args):
    path: str = Field(description="File path in the workspace (.docx).")
    start_block: int = Field(default=1, ge=1, description="First paragraph/table to show (1-based).")
    max_blocks: int = Field(default=400, ge=1, le=10000, description="How many paragraphs/tables to show.")


def _read_docx(handle: BinaryIO, name: str, args: DocxArgs, limit: int) -> str:
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    document = docx.Document(handle)
    blocks: list[str] = []
    for child in document.element.body.iterchildren():
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "p":
            paragraph = Paragraph(child, document)
            text = paragraph.text.strip()
            if not text:
                continue
            style = (paragraph.style.name if paragraph.style is not None else "") or ""
            if style.startswith("Heading") and style[-1:].isdigit():
                text = "#" * int(style[-1]) + " " + text
            elif style == "Title":
                text = "# " + text
            elif "List" in style:
                text = "- " + text
            blocks.append(text)
        elif tag == "tbl":
            table = Table(child, document)
            blocks.append(markdown_table([[cell.text for cell in row.cells] for row in table.rows]))
    start = args.start_block - 1
    shown = blocks[start : start + args.max_blocks]
    head = f"{name}: {len(blocks)} blocks (paragraphs and tables); showing {start + 1}-{start + len(shown)}\n\n"
    more = f"\n\n[more: call again with start_block={start + len(shown) + 1}]" if start + len(shown) < len(blocks) else ""
    return truncate(head + "\n\n".join(shown) + more, limit, "use start_block/max_blocks to page")


@tool("documents-docx", "read_docx", "Read a Word document (.docx) from the workspace as markdown (headings, lists, tables).", DocxArgs)
async def read_docx(ctx: ToolContext, args: DocxArgs) -> str:
    return await _read_doc(ctx, args.path, (".docx",), "documents-docx", "a Word document", _read_docx, args, ctx.settings.doc_max_chars)


# ---------------------------------------------------------------------------------------------
# PowerPoint
# ---------------------------------------------------------------------------------------------


class PptxArgs(Args):
    path: str = Field(description="File path in the workspace (.pptx).")
    slides: str | None = Field(default=None, description="Slides to read, e.g. '1-3,5'; all when omitted.")


def _read_pptx(handle: BinaryIO, name: str, args: PptxArgs, limit: int) -> str:
    from pptx import Presentation

    deck = Presentation(handle)
    slides = list(deck.slides)
    chosen = parse_selection(args.slides, len(slides), "slide")
    parts = [f"{name}: {len(slides)} slides"]
    for number in chosen:
        slide = slides[number - 1]
        lines = [f"## Slide {number}"]
        for shape in slide.shapes:
            if shape.has_text_frame:
                text = shape.text_frame.text.strip()
                if text:
                    lines.append(text)
            if getattr(shape, "has_table", False) and shape.has_table:
                lines.append(markdown_table([[cell.text for cell in row.cells] for row in shape.table.rows]))
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame.text.strip()
            if notes:
                lines.append(f"Notes: {notes}")
        parts.append("\n".join(lines))
    return truncate("\n\n".join(parts), limit, "use slides='N-M' to read fewer slides")


@tool("documents-pptx", "read_pptx", "Read a PowerPoint deck (.pptx) from the workspace: text, tables and notes per slide.", PptxArgs)
async def read_pptx(ctx: ToolContext, args: PptxArgs) -> str:
    return await _read_doc(ctx, args.path, (".pptx",), "documents-pptx", "a PowerPoint deck", _read_pptx, args, ctx.settings.doc_max_chars)


# ---------------------------------------------------------------------------------------------
# PDF
# ---------------------------------------------------------------------------------------------


class PdfArgs(Args):
    path: str = Field(description="File path in the workspace (.pdf).")
    pages: str | None = Field(default=None, description="Pages to read, e.g. '1-3,7'; all when omitted.")


def pdf_text(data: bytes | BinaryIO, pages: str | None, limit: int, name: str) -> str:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data) if isinstance(data, bytes) else data)
    if reader.is_encrypted:
        try:
            reader.decrypt("")
        except Exception:
            raise ToolError(f"{name} is an encrypted PDF that needs a password") from None
    count = len(reader.pages)
    chosen = parse_selection(pages, count, "page")
    parts = [f"{name}: {count} pages"]
    for number in chosen:
        text = (reader.pages[number - 1].extract_text() or "").strip()
        parts.append(f"## Page {number}\n{text or '(no extractable text: the page may be a scanned image)'}")
    return truncate("\n\n".join(parts), limit, "use pages='N-M' to read other pages")


@tool("documents-pdf", "read_pdf", "Read the text of a PDF from the workspace, page by page.", PdfArgs)
async def read_pdf(ctx: ToolContext, args: PdfArgs) -> str:
    def read(handle: BinaryIO, name: str) -> str:
        return pdf_text(handle, args.pages, ctx.settings.doc_max_chars, name)

    return await _read_doc(ctx, args.path, (".pdf",), "documents-pdf", "a PDF", read)


# ---------------------------------------------------------------------------------------------
# Text, markdown, JSON, XML, HTML
# ---------------------------------------------------------------------------------------------

TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".json", ".jsonl", ".xml", ".html", ".htm", ".csv", ".tsv", ".log", ".py", ".yaml", ".yml", ".pdb", "")


class TextArgs(Args):
    path: str = Field(description="File path in the workspace (txt, md, json, jsonl, xml, html, ...).")
    start_line: int = Field(default=1, ge=1, description="First line to show (1-based).")
    max_lines: int = Field(default=1000, ge=1, le=100000, description="How many lines to show.")
    html_as_text: bool = Field(default=True, description="For HTML: show the page's main text instead of markup.")


def _read_text(handle: BinaryIO, name: str, args: TextArgs, limit: int) -> str:
    raw = handle.read()
    if b"\x00" in raw[:4096]:
        raise ToolError(f"{name} looks binary, not text; use the matching documents-* reader or intelligence-code")
    text = raw.decode("utf-8-sig", errors="replace")
    suffix = PurePosixPath(name).suffix.lower()
    note = ""
    if suffix in (".html", ".htm") and args.html_as_text:
        title, text = html_to_text(text)
        note = f" (main text of the page{f' titled {title!r}' if title else ''})"
    elif suffix == ".json":
        try:
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            note = " (not valid JSON; shown as text)"
    lines = text.splitlines()
    start = args.start_line - 1
    shown = lines[start : start + args.max_lines]
    head = f"{name}: {len(lines)} lines{note}; showing {start + 1}-{start + len(shown)}\n\n"
    more = f"\n\n[more: call again with start_line={start + len(shown) + 1}]" if start + len(shown) < len(lines) else ""
    return truncate(head + "\n".join(shown) + more, limit, "use start_line/max_lines to page")


@tool(
    "documents-txt",
    "read_text",
    "Read a text file from the workspace (txt, markdown, JSON (pretty-printed), XML, HTML (main text)), a range of lines at a time.",
    TextArgs,
)
async def read_text(ctx: ToolContext, args: TextArgs) -> str:
    return await _read_doc(ctx, args.path, (), "documents-txt", "text", _read_text, args, ctx.settings.doc_max_chars)


class ListArgs(Args):
    directory: str = Field(default=".", description="Directory in the workspace to list.")


@tool(
    "documents-txt",
    "list_files",
    "List the files in the episode's workspace (attachments, downloads, outputs) with their sizes; symbolic links "
    "are shown as links, not followed.",
    ListArgs,
)
async def list_files(ctx: ToolContext, args: ListArgs) -> str:
    entries, more = await asyncio.to_thread(ctx.workspace.walk, args.directory)
    lines = [f"{name}\t{size} bytes" if size is not None else f"{name}\t(symbolic link, not followed)" for name, size in entries]
    if more:
        lines.append("... (more files not shown)")
    return "\n".join(lines) if lines else "(the workspace is empty)"


TOOLS = [read_csv, read_excel, read_docx, read_pptx, read_pdf, read_text, list_files]
