"""Network tools: download, readweb, wiki, wayback, arxiv, search.

Each speaks the real service's API (Wikipedia's REST and Action APIs, the Wayback availability
API, arXiv's Atom API, Google Programmable Search / Tavily / Jina) at a base URL that is a
setting, so tests and mirrors can stand in for the public hosts.
"""

from __future__ import annotations

import asyncio
import re
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any, Literal
from urllib.parse import quote, unquote, urlsplit

from pydantic import Field

from aworld_gaia_env.errors import MissingConfigError, ToolError
from aworld_gaia_env.settings import GaiaEnvSettings
from aworld_gaia_env.tools.base import Args, ToolContext, tool, truncate
from aworld_gaia_env.tools.documents import pdf_text
from aworld_gaia_env.tools.html_text import html_to_text

_TAG = re.compile(r"<[^>]+>")


def _plain(html: str) -> str:
    return re.sub(r"\s+", " ", _TAG.sub("", html)).strip()


def _body_text(ctx: ToolContext, content_type: str, body: bytes, text: str, name: str) -> tuple[str, str]:
    """(kind, readable text) of a fetched body."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == "application/pdf" or body[:5] == b"%PDF-":
        return "pdf", pdf_text(body, None, ctx.settings.doc_max_chars * 4, name)
    if "html" in kind or (not kind and "<html" in text[:2000].lower()):
        title, main = html_to_text(text)
        return "html", (f"# {title}\n\n" if title else "") + main
    if kind.startswith("text/") or kind in ("application/json", "application/xml", "") or kind.endswith("+xml"):
        return "text", text
    raise ToolError(f"{name} is {kind} content, not text; save it with download__download_file and read it with a documents-* tool")


# ---------------------------------------------------------------------------------------------
# download, readweb
# ---------------------------------------------------------------------------------------------


class DownloadArgs(Args):
    url: str = Field(description="http(s) URL of the file.")
    filename: str | None = Field(default=None, description="Name to save it under in the workspace; from the URL when omitted.")


def _filename_from(url: str) -> str:
    name = PurePosixPath(unquote(urlsplit(url).path)).name
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    return name or "download"


@tool(
    "download",
    "download_file",
    "Download a file from an http(s) URL into the episode's workspace (size and time limited); reports its name, "
    "size and content type.",
    DownloadArgs,
)
async def download_file(ctx: ToolContext, args: DownloadArgs) -> str:
    name = args.filename or _filename_from(args.url)
    with ctx.workspace.writing(name) as (out, rel):  # race-free, renamed into place only when complete
        result = await ctx.services.download_to(
            args.url, out, max_bytes=ctx.settings.download_max_bytes, timeout_s=ctx.settings.http_timeout_s * 4
        )
        size = out.tell()
    kind = result.content_type.split(";")[0] or "unknown"
    return f"saved {rel} ({size} bytes, content type {kind}) from {result.url}"


class ReadWebArgs(Args):
    url: str = Field(description="http(s) URL of the page.")
    start_char: int = Field(default=0, ge=0, description="Offset in the extracted text, to page through long pages.")
    max_chars: int | None = Field(default=None, ge=100, description="How much text to return (server limit applies).")


@tool(
    "readweb",
    "read_webpage",
    "Fetch a web page and return its main text (HTML without navigation and scripts; PDFs as text).",
    ReadWebArgs,
)
async def read_webpage(ctx: ToolContext, args: ReadWebArgs) -> str:
    result = await ctx.services.fetch(args.url, service="readweb", untrusted=True)
    _, text = await asyncio.to_thread(_body_text, ctx, result.content_type, result.body, result.text(), args.url)
    limit = min(args.max_chars or ctx.settings.doc_max_chars, ctx.settings.doc_max_chars)
    window = text[args.start_char : args.start_char + limit]
    head = f"{result.url} ({len(text)} characters of text; showing {args.start_char}-{args.start_char + len(window)})"
    if result.truncated:
        head += " [the page was larger than DOWNLOAD_MAX_BYTES and was cut]"
    more = ""
    if args.start_char + len(window) < len(text):
        more = f"\n\n[more: call again with start_char={args.start_char + len(window)}]"
    return f"{head}\n\n{window}{more}"


# ---------------------------------------------------------------------------------------------
# Wikipedia
# ---------------------------------------------------------------------------------------------


def _wiki_api(ctx: ToolContext) -> str:
    return ctx.settings.wiki_base_url.rstrip("/") + "/w/api.php"


async def _wiki_query(ctx: ToolContext, params: dict[str, Any]) -> dict[str, Any]:
    result = await ctx.services.fetch(
        _wiki_api(ctx), service="Wikipedia", params={"action": "query", "format": "json", "formatversion": "2", **params}
    )
    payload = result.json("Wikipedia")
    if "error" in payload:
        raise ToolError(f"Wikipedia API error: {payload['error'].get('info', payload['error'])}")
    return payload


def _first_page(payload: dict[str, Any], title: str) -> dict[str, Any]:
    pages = payload.get("query", {}).get("pages", [])
    if not pages or pages[0].get("missing") or pages[0].get("invalid"):
        raise ToolError(f"Wikipedia has no page titled {title!r}; use wiki__search to find the exact title")
    return pages[0]


class WikiSearchArgs(Args):
    query: str = Field(description="What to search for.")
    limit: int = Field(default=5, ge=1, le=50)


@tool("wiki", "search", "Search Wikipedia; returns matching page titles with snippets.", WikiSearchArgs)
async def wiki_search(ctx: ToolContext, args: WikiSearchArgs) -> str:
    payload = await _wiki_query(ctx, {"list": "search", "srsearch": args.query, "srlimit": str(args.limit)})
    hits = payload.get("query", {}).get("search", [])
    if not hits:
        return f"no Wikipedia pages match {args.query!r}"
    return "\n".join(f"{i}. {hit['title']}: {_plain(hit.get('snippet', ''))}" for i, hit in enumerate(hits, 1))


class WikiTitleArgs(Args):
    title: str = Field(description="Exact page title, e.g. 'Alan Turing'.")


@tool("wiki", "summary", "The summary (lead) of a Wikipedia page.", WikiTitleArgs)
async def wiki_summary(ctx: ToolContext, args: WikiTitleArgs) -> str:
    url = ctx.settings.wiki_base_url.rstrip("/") + "/api/rest_v1/page/summary/" + quote(args.title.replace(" ", "_"), safe="")
    result = await ctx.services.fetch(url, service="Wikipedia", raise_for_status=False)
    if result.status == 404:
        raise ToolError(f"Wikipedia has no page titled {args.title!r}; use wiki__search to find the exact title")
    if result.status >= 400:
        raise ToolError(f"Wikipedia summary failed: HTTP {result.status}: {result.text()[:200]!r}")
    data = result.json("Wikipedia")
    page = data.get("content_urls", {}).get("desktop", {}).get("page", "")
    description = f" ({data['description']})" if data.get("description") else ""
    return f"{data.get('title', args.title)}{description}\n{page}\n\n{data.get('extract', '')}".strip()


class WikiPageArgs(Args):
    title: str = Field(description="Exact page title.")
    start_char: int = Field(default=0, ge=0, description="Offset into the page text, to page through long pages.")


@tool("wiki", "page", "The full plain text of a Wikipedia page (current revision), in windows.", WikiPageArgs)
async def wiki_page(ctx: ToolContext, args: WikiPageArgs) -> str:
    payload = await _wiki_query(
        ctx, {"prop": "extracts", "explaintext": "1", "redirects": "1", "titles": args.title}
    )
    page = _first_page(payload, args.title)
    text = page.get("extract", "")
    limit = ctx.settings.doc_max_chars
    window = text[args.start_char : args.start_char + limit]
    more = f"\n\n[more: call again with start_char={args.start_char + len(window)}]" if args.start_char + len(window) < len(text) else ""
    return f"{page.get('title', args.title)} ({len(text)} characters)\n\n{window}{more}"


class WikiRevisionArgs(Args):
    title: str = Field(description="Exact page title.")
    date: str = Field(description="The page as it was at the end of this day: 'YYYY-MM-DD' (or an ISO timestamp).")


def _parse_date(value: str) -> str:
    value = value.strip()
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d", "%Y-%m", "%Y"):
        try:
            moment = datetime.strptime(value, fmt)
        except ValueError:
            continue
        if fmt in ("%Y-%m-%d", "%Y-%m", "%Y"):
            return moment.strftime("%Y-%m-%dT23:59:59Z")
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    raise ToolError(f"bad date {value!r}: use YYYY-MM-DD, e.g. 2022-12-31")


@tool(
    "wiki",
    "revision_at",
    "A Wikipedia page as it was at a date: the last revision at or before it (wikitext).",
    WikiRevisionArgs,
)
async def wiki_revision_at(ctx: ToolContext, args: WikiRevisionArgs) -> str:
    when = _parse_date(args.date)
    payload = await _wiki_query(
        ctx,
        {
            "prop": "revisions",
            "titles": args.title,
            "redirects": "1",
            "rvlimit": "1",
            "rvdir": "older",
            "rvstart": when,
            "rvprop": "ids|timestamp|content",
            "rvslots": "main",
        },
    )
    page = _first_page(payload, args.title)
    revisions = page.get("revisions") or []
    if not revisions:
        raise ToolError(f"{args.title!r} has no revision at or before {when} (the page did not exist yet)")
    revision = revisions[0]
    content = revision.get("slots", {}).get("main", {}).get("content", revision.get("content", ""))
    head = f"{page.get('title', args.title)} as of {when}: revision {revision.get('revid')} from {revision.get('timestamp')}\n\n"
    return truncate(head + content, ctx.settings.doc_max_chars, "the revision is long; search it with intelligence-code after downloading")


# ---------------------------------------------------------------------------------------------
# Wayback Machine
# ---------------------------------------------------------------------------------------------


class WaybackArgs(Args):
    url: str = Field(description="The original URL.")
    timestamp: str | None = Field(default=None, description="YYYYMMDD[hhmmss]: the snapshot closest to it; the latest when omitted.")


async def _closest(ctx: ToolContext, args: WaybackArgs) -> dict[str, Any] | None:
    params = {"url": args.url}
    if args.timestamp:
        if not re.fullmatch(r"\d{4,14}", args.timestamp):
            raise ToolError(f"bad timestamp {args.timestamp!r}: use YYYYMMDD or YYYYMMDDhhmmss")
        params["timestamp"] = args.timestamp
    result = await ctx.services.fetch(
        ctx.settings.wayback_api_base_url.rstrip("/") + "/wayback/available", service="Wayback Machine", params=params
    )
    closest = result.json("Wayback Machine").get("archived_snapshots", {}).get("closest")
    return closest if closest and closest.get("available") else None


@tool("wayback", "available", "Whether the Wayback Machine has a snapshot of a URL, and the one closest to a date.", WaybackArgs)
async def wayback_available(ctx: ToolContext, args: WaybackArgs) -> str:
    closest = await _closest(ctx, args)
    if closest is None:
        return f"no Wayback Machine snapshot of {args.url}"
    return f"snapshot of {args.url} at {closest.get('timestamp')} (HTTP {closest.get('status')}): {closest.get('url')}"


@tool("wayback", "fetch", "The text of the Wayback Machine snapshot of a URL closest to a date.", WaybackArgs)
async def wayback_fetch(ctx: ToolContext, args: WaybackArgs) -> str:
    closest = await _closest(ctx, args)
    if closest is None:
        raise ToolError(f"no Wayback Machine snapshot of {args.url}; try another URL or wayback__available")
    stamp = closest["timestamp"]
    snapshot = f"{ctx.settings.wayback_snapshot_base_url.rstrip('/')}/web/{stamp}id_/{args.url}"
    result = await ctx.services.fetch(snapshot, service="Wayback Machine")
    _, text = await asyncio.to_thread(_body_text, ctx, result.content_type, result.body, result.text(), snapshot)
    return truncate(f"{args.url} as archived at {stamp}\n\n{text}", ctx.settings.doc_max_chars, "the snapshot is long")


# ---------------------------------------------------------------------------------------------
# arXiv
# ---------------------------------------------------------------------------------------------

_ATOM = "{http://www.w3.org/2005/Atom}"
_ARXIV = "{http://arxiv.org/schemas/atom}"


def _entries(xml_text: str) -> list[dict[str, Any]]:
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise ToolError(f"arXiv answered with malformed XML: {exc}") from None
    papers = []
    for entry in root.findall(f"{_ATOM}entry"):
        ident = (entry.findtext(f"{_ATOM}id") or "").strip()
        if not ident or (entry.findtext(f"{_ATOM}title") or "").strip() == "Error":
            summary = (entry.findtext(f"{_ATOM}summary") or "").strip()
            raise ToolError(f"arXiv API error: {summary or 'unknown error'}")
        pdf = next((link.get("href") for link in entry.findall(f"{_ATOM}link") if link.get("title") == "pdf"), None)
        primary = entry.find(f"{_ARXIV}primary_category")
        papers.append(
            {
                "id": ident.rsplit("/abs/", 1)[-1],
                "title": " ".join((entry.findtext(f"{_ATOM}title") or "").split()),
                "authors": [(a.findtext(f"{_ATOM}name") or "").strip() for a in entry.findall(f"{_ATOM}author")],
                "published": (entry.findtext(f"{_ATOM}published") or "").strip(),
                "updated": (entry.findtext(f"{_ATOM}updated") or "").strip(),
                "summary": " ".join((entry.findtext(f"{_ATOM}summary") or "").split()),
                "categories": [c.get("term") for c in entry.findall(f"{_ATOM}category")],
                "primary_category": primary.get("term") if primary is not None else None,
                "doi": (entry.findtext(f"{_ARXIV}doi") or "").strip() or None,
                "comment": (entry.findtext(f"{_ARXIV}comment") or "").strip() or None,
                "pdf": pdf,
            }
        )
    return papers


def _paper_text(paper: dict[str, Any], full: bool) -> str:
    lines = [
        f"{paper['id']}: {paper['title']}",
        f"authors: {', '.join(paper['authors'])}",
        f"published: {paper['published']}  updated: {paper['updated']}",
        f"categories: {', '.join(c for c in paper['categories'] if c)}",
    ]
    if paper["doi"]:
        lines.append(f"doi: {paper['doi']}")
    if paper["comment"]:
        lines.append(f"comment: {paper['comment']}")
    summary = paper["summary"] if full else (paper["summary"][:300] + ("..." if len(paper["summary"]) > 300 else ""))
    lines.append(f"abstract: {summary}")
    return "\n".join(lines)


async def _arxiv(ctx: ToolContext, params: dict[str, str]) -> list[dict[str, Any]]:
    result = await ctx.services.fetch(ctx.settings.arxiv_api_base_url, service="arXiv", params=params)
    return _entries(result.text())


class ArxivSearchArgs(Args):
    query: str = Field(description="Search terms; arXiv field prefixes work too (ti:, au:, abs:, cat:).")
    max_results: int = Field(default=5, ge=1, le=50)
    sort_by: Literal["relevance", "lastUpdatedDate", "submittedDate"] = "relevance"


@tool("arxiv", "search", "Search arXiv papers (title, authors, date, abstract excerpt).", ArxivSearchArgs)
async def arxiv_search(ctx: ToolContext, args: ArxivSearchArgs) -> str:
    query = args.query if re.match(r"^(ti|au|abs|co|jr|cat|rn|id|all):", args.query) else f"all:{args.query}"
    papers = await _arxiv(
        ctx, {"search_query": query, "start": "0", "max_results": str(args.max_results), "sortBy": args.sort_by}
    )
    if not papers:
        return f"no arXiv papers match {args.query!r}"
    return "\n\n".join(f"{i}. {_paper_text(p, full=False)}" for i, p in enumerate(papers, 1))


class ArxivIdArgs(Args):
    arxiv_id: str = Field(description="An arXiv id such as '1706.03762' or '1706.03762v5'.")


def _check_id(value: str) -> str:
    ident = value.strip().removeprefix("arXiv:").removeprefix("arxiv:")
    if not re.fullmatch(r"(\d{4}\.\d{4,5}|[a-z-]+(\.[A-Z]{2})?/\d{7})(v\d+)?", ident):
        raise ToolError(f"bad arXiv id {value!r}: expected e.g. '1706.03762' or 'hep-th/9901001'")
    return ident


@tool("arxiv", "paper", "Metadata and abstract of one arXiv paper.", ArxivIdArgs)
async def arxiv_paper(ctx: ToolContext, args: ArxivIdArgs) -> str:
    ident = _check_id(args.arxiv_id)
    papers = await _arxiv(ctx, {"id_list": ident})
    if not papers:
        raise ToolError(f"arXiv has no paper {ident}")
    return _paper_text(papers[0], full=True)


class ArxivPdfArgs(ArxivIdArgs):
    pages: str | None = Field(default=None, description="Pages to read, e.g. '1-3'; all when omitted.")


@tool("arxiv", "pdf_text", "The text of an arXiv paper's PDF, page by page.", ArxivPdfArgs)
async def arxiv_pdf_text(ctx: ToolContext, args: ArxivPdfArgs) -> str:
    ident = _check_id(args.arxiv_id)
    result = await ctx.services.fetch(f"{ctx.settings.arxiv_pdf_base_url.rstrip('/')}/{ident}", service="arXiv PDF")
    if result.truncated:
        raise ToolError(f"the PDF of {ident} is larger than DOWNLOAD_MAX_BYTES")
    return await asyncio.to_thread(pdf_text, result.body, args.pages, ctx.settings.doc_max_chars, f"arXiv {ident}")


# ---------------------------------------------------------------------------------------------
# Web search
# ---------------------------------------------------------------------------------------------


def search_provider(settings: GaiaEnvSettings) -> str | None:
    if settings.google_api_key and settings.google_cse_id:
        return "google"
    if settings.tavily_api_key:
        return "tavily"
    if settings.jina_api_key:
        return "jina"
    return None


def _search_missing(settings: GaiaEnvSettings) -> ToolError | None:
    if search_provider(settings) is not None:
        return None
    return MissingConfigError(
        "search__web",
        ["GOOGLE_API_KEY with GOOGLE_CSE_ID (Google Programmable Search), or TAVILY_API_KEY, or JINA_API_KEY"],
    )


class SearchArgs(Args):
    query: str = Field(description="The search query.")
    num_results: int = Field(default=5, ge=1, le=10)


@tool(
    "search",
    "web",
    "Search the web (Google Programmable Search, Tavily or Jina, whichever is configured); returns titles, URLs "
    "and snippets.",
    SearchArgs,
    missing=_search_missing,
)
async def search_web(ctx: ToolContext, args: SearchArgs) -> str:
    s = ctx.settings
    provider = search_provider(s)
    hits: list[tuple[str, str, str]] = []
    if provider == "google":
        result = await ctx.services.fetch(
            s.google_search_base_url,
            service="Google search",
            params={"key": s.google_api_key, "cx": s.google_cse_id, "q": args.query, "num": str(args.num_results)},
            raise_for_status=False,
        )
        data = result.json("Google search")
        if result.status >= 400 or "error" in data:
            message = data.get("error", {}).get("message") if isinstance(data.get("error"), dict) else data.get("error")
            raise ToolError(f"Google search failed (HTTP {result.status}): {message}; check GOOGLE_API_KEY and GOOGLE_CSE_ID")
        hits = [(i.get("title", ""), i.get("link", ""), i.get("snippet", "")) for i in data.get("items", [])]
    elif provider == "tavily":
        result = await ctx.services.fetch(
            s.tavily_base_url.rstrip("/") + "/search",
            method="POST",
            service="Tavily search",
            headers={"Authorization": f"Bearer {s.tavily_api_key}"},
            json_body={"query": args.query, "max_results": args.num_results, "search_depth": "basic"},
        )
        data = result.json("Tavily search")
        hits = [(r.get("title", ""), r.get("url", ""), r.get("content", "")) for r in data.get("results", [])]
    else:
        result = await ctx.services.fetch(
            s.jina_search_base_url.rstrip("/") + "/",
            service="Jina search",
            params={"q": args.query},
            headers={"Authorization": f"Bearer {s.jina_api_key}", "Accept": "application/json"},
        )
        data = result.json("Jina search")
        hits = [
            (r.get("title", ""), r.get("url", ""), r.get("description") or r.get("content", "")[:300])
            for r in data.get("data") or []
        ]
    hits = hits[: args.num_results]
    if not hits:
        return f"no results for {args.query!r} ({provider})"
    lines = [f"results for {args.query!r} ({provider}):"]
    for i, (title, url, snippet) in enumerate(hits, 1):
        lines.append(f"{i}. {title}\n   {url}\n   {_plain(snippet)}")
    return "\n".join(lines)


TOOLS = [
    download_file,
    read_webpage,
    wiki_search,
    wiki_summary,
    wiki_page,
    wiki_revision_at,
    wayback_available,
    wayback_fetch,
    arxiv_search,
    arxiv_paper,
    arxiv_pdf_text,
    search_web,
]
