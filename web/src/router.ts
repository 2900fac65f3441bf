import { useEffect, useState } from "react";

// A router of three routes needs no library: the path is the state, and
// navigate() pushes it. The server answers every non-API path with
// index.html, so deep links such as /t/{table} load the app.

const listeners = new Set<() => void>();

export function navigate(path: string, replace = false) {
  if (path === location.pathname + location.search) return;
  if (replace) history.replaceState(null, "", path);
  else history.pushState(null, "", path);
  for (const l of listeners) l();
}

export function usePath(): string {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const on = () => setPath(location.pathname);
    listeners.add(on);
    addEventListener("popstate", on);
    return () => {
      listeners.delete(on);
      removeEventListener("popstate", on);
    };
  }, []);
  return path;
}

export function linkClick(path: string) {
  return (e: React.MouseEvent) => {
    if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(path);
  };
}
