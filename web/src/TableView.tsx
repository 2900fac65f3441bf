import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import {
  CompactSelection,
  DataEditor,
  GridCellKind,
  type EditableGridCell,
  type GridCell,
  type GridColumn,
  type GridSelection,
  type Item,
  type Rectangle,
  type Theme,
} from "@glideapps/glide-data-grid";
import { ApiError, type Api, type Field, type RowQuery, type Table } from "./api";
import { fromCell, renderer, toCell } from "./cells";
import { RowWindow, type WindowStatus } from "./rows";
import { Saver, type SaverStatus } from "./saves";
import { messageOf } from "./messages";
import { NotFound } from "./NotFound";
import { linkClick } from "./router";
import { AutomationsPanel } from "./automations/AutomationsPanel";
import { useFrameTick, useLiveRows, useNotices, useOwned, type EditHold } from "./table/hooks";
import { FieldPanel, FieldsPanel, FilterPanel, HeaderMenu } from "./table/panels";
import { LiveBadge, NoticeList, QueryChips } from "./table/parts";

const theme: Partial<Theme> = {
  accentColor: "#2f6fde",
  accentLight: "rgba(47, 111, 222, 0.12)",
  textDark: "#1f2328",
  textMedium: "#57606a",
  textLight: "#8c959f",
  textHeader: "#3d444d",
  bgHeader: "#f6f8fa",
  bgHeaderHovered: "#eef1f4",
  bgHeaderHasFocus: "#e7ecf3",
  borderColor: "rgba(31, 35, 40, 0.10)",
  horizontalBorderColor: "rgba(31, 35, 40, 0.07)",
  fontFamily: "Inter, ui-sans-serif, system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif",
  baseFontStyle: "13px",
  headerFontStyle: "600 13px",
  cellHorizontalPadding: 10,
};

const pendingTheme: Partial<Theme> = { bgCell: "#f3f7ff", textDark: "#3d5a8a" };
const invalidTheme: Partial<Theme> = { bgCell: "#fdecec", textDark: "#9a1c1c" };
const conflictTheme: Partial<Theme> = { bgCell: "#fff4d6", textDark: "#6b4e00" };

export function TableView({ api, tableId, role }: { api: Api; tableId: string; role?: string }) {
  const [table, setTable] = useState<Table | null>(null);
  const [missing, setMissing] = useState(false);
  const [query, setQuery] = useState<RowQuery>({});
  const [tick, bump] = useFrameTick();
  const [winStatus, setWinStatus] = useState<WindowStatus>({ kind: "idle" });
  const [saveStatus, setSaveStatus] = useState<SaverStatus>({ kind: "idle" });
  const { notices, notify, dismiss } = useNotices();
  const [selection, setSelection] = useState<GridSelection>({ columns: CompactSelection.empty(), rows: CompactSelection.empty() });
  const [menu, setMenu] = useState<{ field: Field; x: number; y: number } | null>(null);
  const [panel, setPanel] = useState<"field" | "filter" | "fields" | "automations" | null>(null);
  const [widths, setWidths] = useState<Record<string, number>>({});

  const loadTable = useCallback(async () => {
    try {
      setTable(await api.table(tableId));
    } catch (e) {
      if (isMissing(e)) setMissing(true);
      else notify({ kind: "error", text: messageOf(e) });
    }
  }, [api, tableId, notify]);
  useEffect(() => void loadTable(), [loadTable]);

  // The rows: one window per query; a new sort, filter or search starts afresh.
  const win = useOwned(() => {
    const w = new RowWindow({
      fetchPage: (cursor, limit, signal) => api.rows(tableId, query, cursor, limit, signal),
      pageSize: 500,
      maxPages: 8,
      onChange: bump,
      onStatus: setWinStatus,
    });
    void w.setView(0, 60);
    return w;
  }, [api, tableId, query, bump]);
  const winRef = useRef(win);
  winRef.current = win;
  useEffect(() => {
    if (winStatus.kind === "error" && (winStatus.status === 404 || winStatus.status === 403)) setMissing(true);
  }, [winStatus]);

  // Live updates; a resync reloads the fields and the rows.
  const [hold] = useState<EditHold>(() => ({ row: null, news: new Map() }));
  const live = useLiveRows(api, tableId, win, hold, notify, () => {
    void loadTable();
    setQuery((q) => ({ ...q })); // a new window: the rows afresh
  });

  const fields = useMemo(() => [...(table?.fields ?? [])].sort((a, b) => a.position - b.position), [table]);
  const fieldsRef = useRef(fields);
  fieldsRef.current = fields;

  const saver = useOwned(
    () =>
      new Saver({
        patch: async (rows) => (await api.patchRows(tableId, rows)).rows,
        getRow: (id) => api.row(tableId, id),
        onSaved: (row) => winRef.current?.update(row),
        onChange: bump,
        onStatus: setSaveStatus,
        onInvalid: (rowId, fid, value, message) => {
          const f = fieldsRef.current.find((x) => x.id === fid);
          notify({
            kind: "error",
            rowId,
            fieldId: fid,
            text: `“${f?.name ?? fid}” was not saved: ${message}. What you typed (${show(value)}) stays in the cell, marked red; edit it to try again.`,
          });
        },
        onConflict: (c) => {
          for (const [fid, mine] of Object.entries(c.mine)) {
            const f = fieldsRef.current.find((x) => x.id === fid);
            const theirs = c.theirs ? c.theirs.cells[fid] : undefined;
            notify({
              kind: "conflict",
              rowId: c.rowId,
              fieldId: fid,
              mine,
              text: c.theirs
                ? `Someone else changed this row while you were editing. “${f?.name ?? fid}” now shows their value: ${show(theirs)}. Yours was ${show(mine)} and was not saved.`
                : `Someone else changed or deleted this row; your value ${show(mine)} for “${f?.name ?? fid}” was not saved.`,
            });
          }
        },
      }),
    [api, tableId, bump, notify],
  );

  useEffect(() => {
    const warn = (e: BeforeUnloadEvent) => {
      if (saver?.hasUnsaved && saveStatus.kind !== "idle") {
        e.preventDefault();
        e.returnValue = "";
      }
    };
    addEventListener("beforeunload", warn);
    return () => removeEventListener("beforeunload", warn);
  }, [saver, saveStatus]);

  // Mark the moment the first rows are on screen, for the speed test.
  const marked = useRef(false);
  useEffect(() => {
    if (!marked.current && table && win && win.knownRows > 0) {
      marked.current = true;
      requestAnimationFrame(() => performance.mark("appdor:first-rows"));
    }
  }, [tick, table, win]);

  const columns: GridColumn[] = useMemo(
    () =>
      fields.map((f) => ({
        id: f.id,
        title: f.name,
        width: widths[f.id] ?? (f.type === "checkbox" ? 110 : f.type === "long_text" ? 280 : 180),
        hasMenu: true,
      })),
    [fields, widths],
  );

  const getCellContent = useCallback(
    ([col, row]: Item): GridCell => {
      const r = win?.get(row);
      const f = fields[col];
      if (!r || !f) return { kind: GridCellKind.Loading, allowOverlay: false };
      const mark = saver?.cell(r.id, f.id);
      if (!mark) return toCell(f, r.cells[f.id], false);
      if (mark.kind === "conflict") return { ...toCell(f, r.cells[f.id], false), themeOverride: conflictTheme };
      return { ...toCell(f, mark.value, false), themeOverride: mark.kind === "invalid" ? invalidTheme : pendingTheme };
    },
    // tick: the rows or the marks changed
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [win, saver, fields, tick],
  );

  const onCellEdited = useCallback(
    ([col, row]: Item, value: EditableGridCell) => {
      const r = win?.get(row);
      const f = fields[col];
      if (!r || !f || !saver) return;
      saver.edit(r.id, r.version, f.id, fromCell(f, value));
    },
    [win, saver, fields],
  );

  // Glide 6.0.3 does not report an edit made in an editor that was opened
  // by a key pressed on its accessible table (the screen-reader path) rather
  // than on the canvas; it still reports that the editing finished. So the
  // finished value is applied here when no edit was reported for it, and
  // nothing typed is lost on that path either.
  const reported = useRef<unknown>(undefined);
  const onCellEditedOnce = useCallback(
    (cell: Item, value: EditableGridCell) => {
      reported.current = value;
      onCellEdited(cell, value);
    },
    [onCellEdited],
  );
  const onCellActivated = useCallback(([, row]: Item) => {
    hold.row = win?.get(row)?.id ?? null;
  }, [win, hold]);
  const onFinishedEditing = useCallback(
    (value: GridCell | undefined) => {
      const editing = hold.row;
      hold.row = null;
      const news = editing ? hold.news.get(editing) : undefined;
      if (news) {
        hold.news.delete(editing!);
        queueMicrotask(() => winRef.current?.update(news)); // after the edit is queued with the version it was made on
      }
      const was = reported.current;
      reported.current = undefined;
      const at = selection.current?.cell;
      if (value === undefined || was === value || !at || value.kind === GridCellKind.Loading) return;
      if ("readonly" in value && value.readonly) return;
      const r = win?.get(at[1]);
      const f = fields[at[0]];
      if (!r || !f || JSON.stringify(fromCell(f, value) ?? null) === JSON.stringify(r.cells[f.id] ?? null)) return;
      onCellEdited(at, value as EditableGridCell);
    },
    [onCellEdited, selection, win, fields, hold],
  );

  const onVisible = useCallback((range: Rectangle) => void win?.setView(range.y, range.y + range.height), [win]);

  const selectedIds = useMemo(() => {
    const ids: string[] = [];
    for (const i of selection.rows.toArray()) {
      const r = win?.get(i);
      if (r) ids.push(r.id);
    }
    return ids;
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [selection, win, tick]);

  // The message of the focused cell, when it is marked.
  const focused = selection.current?.cell;
  const focusedMark = useMemo(() => {
    if (!focused) return undefined;
    const r = win?.get(focused[1]);
    const f = fields[focused[0]];
    return r && f ? saver?.cell(r.id, f.id) : undefined;
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [focused, win, saver, fields, tick]);

  const run = async (fn: () => Promise<unknown>) => {
    try {
      await fn();
    } catch (e) {
      notify({ kind: "error", text: messageOf(e) });
    }
  };

  const addRow = () =>
    run(async () => {
      const { rows } = await api.createRows(tableId, [{ cells: {} }]);
      if (!winRef.current?.append(rows)) notify({ kind: "info", text: "Row added at the end of the table." });
    });

  const deleteRows = () =>
    run(async () => {
      if (selectedIds.length === 0) return;
      if (!confirm(`Delete ${selectedIds.length} row${selectedIds.length === 1 ? "" : "s"}? This cannot be undone.`)) return;
      await api.deleteRows(tableId, selectedIds);
      winRef.current?.remove(selectedIds);
      setSelection({ columns: CompactSelection.empty(), rows: CompactSelection.empty() });
    });

  const exportCsv = () =>
    run(async () => {
      const res = await api.exportCsv(tableId);
      const url = URL.createObjectURL(await res.blob());
      const a = document.createElement("a");
      a.href = url;
      a.download = `${table?.name ?? "table"}.csv`;
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 1000);
    });

  const fileInput = useRef<HTMLInputElement>(null);
  const importCsv = (file: File) =>
    run(async () => {
      await api.importCsv(tableId, file);
      notify({ kind: "info", text: `Imported ${file.name}.` });
      setQuery((q) => ({ ...q }));
    });

  const onColumnMoved = (from: number, to: number) =>
    run(async () => {
      const f = fields[from];
      const next = [...fields];
      next.splice(from, 1);
      next.splice(to, 0, f);
      setTable((t) => t && { ...t, fields: next.map((x, i) => ({ ...x, position: i })) });
      await api.patchField(tableId, f.id, { position: to });
      await loadTable();
    });

  const [search, setSearch] = useState("");
  useEffect(() => {
    const t = setTimeout(() => setQuery((q) => ((q.q ?? "") === search.trim() ? q : { ...q, q: search.trim() || undefined })), 300);
    return () => clearTimeout(t);
  }, [search]);

  const customRenderers = useMemo(() => [renderer(api)], [api]);

  if (missing) return <NotFound what="table" />;

  return (
    <div className="table-view">
      <div className="toolbar">
        <div className="crumbs">
          <a href="/" onClick={linkClick("/")}>
            Apps
          </a>
          <span aria-hidden>/</span>
          <h1>{table?.name ?? "…"}</h1>
          <LiveBadge state={live} />
        </div>
        <input className="search" type="search" placeholder="Search rows" aria-label="Search rows" value={search} onChange={(e) => setSearch(e.target.value)} />
        <select
          className="sort"
          aria-label="Sort"
          value={query.sort ?? ""}
          onChange={(e) => setQuery((q) => ({ ...q, sort: e.target.value || undefined }))}
        >
          <option value="">Unsorted</option>
          {fields.flatMap((f) => [
            <option key={f.id} value={f.id}>
              {f.name} ↑
            </option>,
            <option key={"-" + f.id} value={"-" + f.id}>
              {f.name} ↓
            </option>,
          ])}
        </select>
        <button className="btn" onClick={() => setPanel(panel === "filter" ? null : "filter")} aria-expanded={panel === "filter"}>
          Filter{query.filter?.length ? ` (${query.filter.length})` : ""}
        </button>
        <button className="btn" onClick={() => setPanel(panel === "field" ? null : "field")} aria-expanded={panel === "field"}>
          Add field
        </button>
        <button className="btn" onClick={() => setPanel(panel === "fields" ? null : "fields")} aria-expanded={panel === "fields"}>
          Fields
        </button>
        <button className="btn" onClick={addRow}>
          Add row
        </button>
        <button className="btn danger" onClick={deleteRows} disabled={selectedIds.length === 0}>
          Delete {selectedIds.length || ""} row{selectedIds.length === 1 ? "" : "s"}
        </button>
        <div className="spacer" />
        <button className="btn" onClick={() => setPanel(panel === "automations" ? null : "automations")} aria-expanded={panel === "automations"}>
          Automations
        </button>
        <button className="btn ghost" onClick={() => fileInput.current?.click()}>
          Import CSV
        </button>
        <input ref={fileInput} type="file" accept=".csv,text/csv" hidden onChange={(e) => e.target.files?.[0] && importCsv(e.target.files[0])} />
        <button className="btn ghost" onClick={exportCsv}>
          Export CSV
        </button>
      </div>

      <QueryChips query={query} fields={fields} onChange={setQuery} />

      {panel === "filter" && <FilterPanel fields={fields} onAdd={(f) => (setQuery((q) => ({ ...q, filter: [...(q.filter ?? []), f] })), setPanel(null))} onClose={() => setPanel(null)} />}
      {panel === "field" && table && (
        <FieldPanel
          api={api}
          appId={table.app_id}
          onCreate={(f) => run(async () => (await api.createField(tableId, f), await loadTable(), setPanel(null)))}
          onClose={() => setPanel(null)}
        />
      )}

      {panel === "fields" && (
        <FieldsPanel
          fields={fields}
          onRename={(f, name) => run(async () => (await api.patchField(tableId, f.id, { name }), await loadTable()))}
          onMove={(from, to) => void onColumnMoved(from, to)}
          onDelete={(f) =>
            run(async () => {
              if (!confirm(`Delete the field “${f.name}” and its values in every row?`)) return;
              await api.deleteField(tableId, f.id);
              await loadTable();
            })
          }
          onClose={() => setPanel(null)}
        />
      )}

      <div className="grid-wrap">
        {table && win && (
          <DataEditor
            width="100%"
            height="100%"
            theme={theme}
            columns={columns}
            rows={win.rowCount}
            getCellContent={getCellContent}
            onCellEdited={onCellEditedOnce}
            onFinishedEditing={onFinishedEditing}
            onCellActivated={onCellActivated}
            customRenderers={customRenderers}
            onVisibleRegionChanged={onVisible}
            getCellsForSelection={true}
            onPaste={true}
            rowMarkers="both"
            smoothScrollX
            smoothScrollY
            gridSelection={selection}
            onGridSelectionChange={setSelection}
            onColumnMoved={onColumnMoved}
            onColumnResize={(c, w) => setWidths((ws) => ({ ...ws, [c.id!]: w }))}
            onHeaderMenuClick={(col, b) => setMenu({ field: fields[col], x: b.x, y: b.y + b.height })}
            trailingRowOptions={win.hasMore ? undefined : { hint: "New row", sticky: true, tint: true }}
            onRowAppended={win.hasMore ? undefined : () => void addRow()}
            rowHeight={34}
            headerHeight={36}
          />
        )}
        {panel === "automations" && table && <AutomationsPanel api={api} table={table} fields={fields} role={role} onClose={() => setPanel(null)} />}
      </div>

      {menu && (
        <HeaderMenu
          field={menu.field}
          x={menu.x}
          y={menu.y}
          onClose={() => setMenu(null)}
          onSort={(desc) => (setQuery((q) => ({ ...q, sort: (desc ? "-" : "") + menu.field.id })), setMenu(null))}
          onRename={(name) => run(async () => (setMenu(null), await api.patchField(tableId, menu.field.id, { name }), await loadTable()))}
          onDelete={() =>
            run(async () => {
              setMenu(null);
              if (!confirm(`Delete the field “${menu.field.name}” and its values in every row?`)) return;
              await api.deleteField(tableId, menu.field.id);
              await loadTable();
            })
          }
        />
      )}

      <footer className="statusbar" aria-live="polite">
        <span>
          {(win?.knownRows ?? 0).toLocaleString()} row{win?.knownRows === 1 ? "" : "s"}
          {win?.hasMore ? " loaded · more below" : ""}
        </span>
        <span className="status-load">{loadText(winStatus)}</span>
        <span className="spacer" />
        {focusedMark?.kind === "invalid" && <span className="status-invalid">{focusedMark.message}</span>}
        <span className={"status-save " + saveStatus.kind}>{saveText(saveStatus, saver)}</span>
      </footer>

      <div className="notices" role="status">
        <NoticeList
          notices={notices}
          onUseMine={(n) => {
            const r = win?.byID(n.rowId!);
            saver?.edit(n.rowId!, r?.version ?? 0, n.fieldId!, n.mine);
            dismiss(n.id);
          }}
          onDismiss={(n) => {
            if (n.rowId && n.fieldId) saver?.dismiss(n.rowId, n.fieldId);
            dismiss(n.id);
          }}
        />
        {winStatus.kind === "error" && !missing && (
          <div className="notice error">
            <p>Rows could not be loaded: {winStatus.message}</p>
            <button className="btn small" onClick={() => void win?.retry()}>
              Retry
            </button>
          </div>
        )}
      </div>
    </div>
  );
}

function show(v: unknown): string {
  if (v === null || v === undefined || v === "") return "(empty)";
  return Array.isArray(v) ? `“${v.join(", ")}”` : `“${String(v)}”`;
}

function loadText(s: WindowStatus): string {
  switch (s.kind) {
    case "loading":
      return "Loading rows…";
    case "waiting":
      return `Server busy; loading again in ${Math.ceil(s.retryInMs / 1000)} s`;
    default:
      return "";
  }
}

function saveText(s: SaverStatus, saver: Saver | null): string {
  switch (s.kind) {
    case "saving":
      return "Saving…";
    case "waiting":
      return s.reason === "network"
        ? `Offline; your changes are kept and will be saved (retry in ${Math.ceil(s.retryInMs / 1000)} s)`
        : `Server busy; your changes are kept and will be saved in ${Math.ceil(s.retryInMs / 1000)} s`;
    case "error":
      return `Not saved: ${s.message}`;
    default:
      return saver?.hasUnsaved ? "Some changes need your attention" : "All changes saved";
  }
}

/** A table that is not there, or not in this realm (RLS answers 404 for another realm's). */
function isMissing(e: unknown): boolean {
  return e instanceof ApiError && (e.status === 404 || e.status === 403);
}
