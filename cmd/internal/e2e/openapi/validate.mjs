// Validates openapi.yaml (the path in argv[2]) with swagger-parser, as a
// user's tooling would: the document, its $refs and its schemas.
import SwaggerParser from "@apidevtools/swagger-parser";

const file = process.argv[2];
try {
  const api = await SwaggerParser.validate(file);
  console.log(`${file}: valid OpenAPI ${api.openapi}, ${Object.keys(api.paths).length} paths`);
} catch (err) {
  console.error(`${file}: ${err.message}`);
  process.exit(1);
}
