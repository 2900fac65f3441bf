import { ApiError } from "./api";

/** The words to show a person for a failed request. */
export function messageOf(e: unknown): string {
  if (e instanceof ApiError) return e.message;
  if (e instanceof TypeError) return "The server cannot be reached. Check your connection.";
  return e instanceof Error ? e.message : String(e);
}
