import { linkClick } from "./router";

/** What a page shows for something that is not there, or not in this realm. */
export function NotFound({ what }: { what: string }) {
  return (
    <div className="page narrow">
      <h1>Not found</h1>
      <p className="muted">
        This {what} was not found, or it belongs to a realm you are not working in.{" "}
        <a href="/" onClick={linkClick("/")}>
          Go to your apps
        </a>
      </p>
    </div>
  );
}
